-- When a change of the plan last enqueued its push-token revocation job: a change that
-- finds a token of an ended lease enqueues one only when none is known to wait (NULL, or
-- so old that the job may have been lost), so that a busy plan's changes cost no job
-- insert each. The job clears it when it starts, before it lists the tokens.
ALTER TABLE github_mirror ADD COLUMN revoke_at timestamptz;
