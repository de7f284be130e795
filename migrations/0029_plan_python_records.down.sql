ALTER TABLE plans DROP COLUMN origin, DROP COLUMN repo_targets;
