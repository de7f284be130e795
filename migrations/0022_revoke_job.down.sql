ALTER TABLE github_mirror DROP COLUMN IF EXISTS revoke_at;
