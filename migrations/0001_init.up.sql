-- whilly's core schema. Money is numeric(14,6): exact to the micro-dollar, never a float.

CREATE TABLE plans (
    id                text        PRIMARY KEY,
    name              text        NOT NULL,
    status            text        NOT NULL DEFAULT 'ACTIVE'
                      CHECK (status IN ('ACTIVE', 'PAUSED', 'DONE', 'FAILED', 'CANCELLED')),
    pause_reason      text,
    budget_usd        numeric(14,6) CHECK (budget_usd >= 0),
    spent_usd         numeric(14,6) NOT NULL DEFAULT 0 CHECK (spent_usd >= 0),
    strict            boolean     NOT NULL DEFAULT false,
    repo              text,
    verify            jsonb       NOT NULL DEFAULT '[]',
    github_issue_ref  text,
    installation_id   bigint,
    status_comment_id bigint,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- One live plan per GitHub issue; a finished plan does not block a new intake.
CREATE UNIQUE INDEX plans_github_issue_ref_live
    ON plans (github_issue_ref)
    WHERE github_issue_ref IS NOT NULL AND status IN ('ACTIVE', 'PAUSED');

CREATE TABLE tasks (
    plan_id             text        NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    id                  text        NOT NULL,
    ord                 integer     NOT NULL,
    status              text        NOT NULL DEFAULT 'PENDING'
                        CHECK (status IN ('PENDING', 'CLAIMED', 'IN_PROGRESS', 'DONE', 'FAILED', 'SKIPPED', 'CANCELLED')),
    priority            text        NOT NULL CHECK (priority IN ('critical', 'high', 'medium', 'low')),
    priority_rank       smallint    GENERATED ALWAYS AS (
                            CASE priority WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END
                        ) STORED,
    description         text        NOT NULL,
    dependencies        text[]      NOT NULL DEFAULT '{}',
    key_files           text[]      NOT NULL DEFAULT '{}',
    acceptance_criteria text[]      NOT NULL DEFAULT '{}',
    test_steps          text[]      NOT NULL DEFAULT '{}',
    prd_requirement     text        NOT NULL DEFAULT '',
    labels              text[]      NOT NULL DEFAULT '{}',
    gate_verdict        text        NOT NULL DEFAULT 'ALLOW' CHECK (gate_verdict IN ('ALLOW', 'WARN', 'REJECT')),
    gate_reasons        jsonb       NOT NULL DEFAULT '[]',
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    not_before          timestamptz,
    lease_id            uuid,
    lease_expires_at    timestamptz,
    claimed_by          text,
    version             integer     NOT NULL DEFAULT 0,
    cost_usd            numeric(14,6) NOT NULL DEFAULT 0 CHECK (cost_usd >= 0),
    last_error          text,
    triz_finding        text,
    result              text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan_id, id)
);

CREATE INDEX tasks_pending ON tasks (priority_rank, plan_id, ord) WHERE status = 'PENDING';
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE status IN ('CLAIMED', 'IN_PROGRESS');
CREATE INDEX tasks_claimed_by ON tasks (claimed_by) WHERE claimed_by IS NOT NULL;

CREATE TABLE workers (
    id             text        PRIMARY KEY,
    hostname       text        NOT NULL,
    token_hash     bytea       NOT NULL UNIQUE,
    labels         text[]      NOT NULL DEFAULT '{}',
    last_heartbeat timestamptz,
    status         text        NOT NULL DEFAULT 'online' CHECK (status IN ('online', 'offline', 'revoked')),
    registered_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);

-- The audit log. No foreign keys: it outlives the plans it speaks of.
CREATE TABLE events (
    id         bigserial   PRIMARY KEY,
    plan_id    text,
    task_id    text,
    type       text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT '{}',
    detail     jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_plan_id ON events (plan_id, id);

CREATE FUNCTION whilly_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- Per statement, so even an UPDATE or DELETE that matches no row is refused.
CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION whilly_events_append_only();

CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION whilly_events_append_only();

-- Every event wakes listeners (SSE, long-polling claims) through the database, never
-- through process memory, so any number of control-plane replicas see it. One NOTIFY per
-- statement and (plan, type): a 10,000-task import sends one, not 10,000. id is the
-- highest event id of the group, min_id the lowest; task_id is set when the group holds
-- one event.
CREATE FUNCTION whilly_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('whilly_events', json_build_object(
        'id', max(id), 'min_id', min(id), 'plan_id', plan_id, 'type', type, 'count', count(*),
        'task_id', CASE WHEN count(*) = 1 THEN min(task_id) END)::text)
    FROM new_events
    GROUP BY plan_id, type;
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_notify
    AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION whilly_events_notify();

CREATE TABLE webhook_deliveries (
    delivery_id     text        PRIMARY KEY,
    event           text        NOT NULL,
    action          text,
    installation_id bigint,
    payload         jsonb       NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    processed_at    timestamptz,
    outcome         text
);

CREATE TABLE installations (
    id           bigint      PRIMARY KEY,
    account      text        NOT NULL,
    account_type text,
    repos        text[]      NOT NULL DEFAULT '{}',
    suspended_at timestamptz,
    deleted_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
    id         bigserial   PRIMARY KEY,
    prefix     text        NOT NULL UNIQUE,
    token_hash bytea       NOT NULL UNIQUE,
    owner      text        NOT NULL,
    admin      boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);
