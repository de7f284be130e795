ALTER TABLE tasks DROP COLUMN IF EXISTS round_context;
ALTER TABLE github_pulls DROP COLUMN IF EXISTS rounds_stopped_by;
DROP TABLE IF EXISTS github_rounds;
