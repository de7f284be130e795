-- Sessions of the web dashboard (issue 13). The cookie holds a random id; only its
-- SHA-256 is stored. A session acts for a principal: an API token (token_prefix set, so
-- revoking or expiring the token ends its sessions at once: the lookup joins api_tokens)
-- or a GitHub user (principal holds the login and the repositories it may read and
-- write). csrf_secret is the per-session token every form post must carry.
CREATE TABLE web_sessions (
    id_hash      bytea       PRIMARY KEY,
    principal    jsonb       NOT NULL,
    token_prefix text        REFERENCES api_tokens (prefix) ON DELETE CASCADE,
    csrf_secret  bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX web_sessions_token ON web_sessions (token_prefix) WHERE token_prefix IS NOT NULL;
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at);
