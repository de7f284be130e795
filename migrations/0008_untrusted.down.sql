DROP TABLE IF EXISTS github_commands;
