DROP TABLE IF EXISTS github_dispatches;
DROP TABLE IF EXISTS github_pulls;
