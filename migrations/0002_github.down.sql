DROP INDEX IF EXISTS plans_github_issue_ref;
DROP INDEX IF EXISTS webhook_deliveries_received;
DROP TABLE IF EXISTS github_labels;
DROP TABLE IF EXISTS github_mirror;
DROP TABLE IF EXISTS github_intakes;
