DROP INDEX IF EXISTS github_mirror_revoke_waiting;
DROP TABLE IF EXISTS push_token_revocations;
