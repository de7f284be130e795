ALTER TABLE github_mirror DROP COLUMN IF EXISTS job_at;
