-- Push-token revocations run one job per installation, not one per plan: a row here says
-- that a revocation job of the installation waits (it has not started yet). A change that
-- ends a lease of a plan of the installation inserts the job only when no row is here (or
-- the row is so old that its job may have been lost), and holds the row (FOR KEY SHARE)
-- until it commits otherwise; the job deletes the row when it starts, which waits for
-- those changes, before it clears its plans' marks (github_mirror.revoke_at) and lists
-- their ended leases' tokens. 0 stands for the plans without an installation.
CREATE TABLE push_token_revocations (
    installation_id bigint      PRIMARY KEY,
    since           timestamptz NOT NULL DEFAULT now()
);
-- The plans whose revocation waits, for the job that clears them.
CREATE INDEX github_mirror_revoke_waiting ON github_mirror (plan_id) WHERE revoke_at IS NOT NULL;
