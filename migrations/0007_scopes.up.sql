-- Scopes: a worker or an API token may be limited to installations,
-- repositories and plans ("installation:ID", "repo:owner/name" in lower case, "plan:ID");
-- an empty list is no limit. A registrar token (whilly admin token mint --bootstrap) may
-- only register workers, which inherit its scopes.
ALTER TABLE workers ADD COLUMN scopes text[] NOT NULL DEFAULT '{}';
ALTER TABLE api_tokens ADD COLUMN scopes text[] NOT NULL DEFAULT '{}';
ALTER TABLE api_tokens ADD COLUMN registrar boolean NOT NULL DEFAULT false;

-- Push tokens minted for one lease each, sealed with a key only the control
-- plane holds, until they are revoked on GitHub when the lease ends.
CREATE TABLE push_tokens (
    lease_id        uuid        PRIMARY KEY,
    plan_id         text        NOT NULL,
    task_id         text        NOT NULL,
    installation_id bigint      NOT NULL,
    sealed          bytea       NOT NULL,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_tokens_plan ON push_tokens (plan_id);
