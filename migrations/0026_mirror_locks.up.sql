-- The lock that keeps two writers of one issue apart (a mirror job and `whilly forge
-- intake`) was a session advisory lock, held on a pooled connection for the whole of a
-- sync: its GitHub calls included. With GitHub's own latency that pinned up to half the
-- pool, and the mirror could run only as many syncs at once as it was allowed
-- connections. A row holds it now, for a time: the holder deletes it when it is done,
-- and a holder that died loses it when it expires. No foreign key: a row outlives its
-- plan only when its holder died, and is replaced by the plan's next lock or never read.
CREATE TABLE github_mirror_locks (
    plan_id    text        PRIMARY KEY,
    holder     uuid        NOT NULL,
    expires_at timestamptz NOT NULL
);
