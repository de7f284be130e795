-- GitHub App state beyond the plans table: intakes (one issue → plan attempt each, the
-- per-issue idempotency record), the mirror's coalescing state per plan, and the labels
-- whilly has made sure exist in each repository.

-- One row per intake of an issue. While an intake is 'started' no other delivery for the
-- same issue may start one (partial unique index): concurrent and repeated deliveries of
-- the same label event give one plan. seq numbers the intakes of an issue, so a reopened
-- issue labelled again gets a new, deterministic plan id.
CREATE TABLE github_intakes (
    issue_ref   text        NOT NULL,
    seq         integer     NOT NULL CHECK (seq >= 1),
    plan_id     text        NOT NULL UNIQUE,
    delivery_id text        NOT NULL,
    state       text        NOT NULL DEFAULT 'started'
                CHECK (state IN ('started', 'planned', 'needs_info', 'abandoned')),
    source      text,
    notes       text[]      NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issue_ref, seq)
);

CREATE UNIQUE INDEX github_intakes_one_started ON github_intakes (issue_ref) WHERE state = 'started';

-- The mirror of a GitHub plan onto its issue. version grows with every change of the
-- plan (the store's PlanChanged hook, in the change's transaction); synced_version is the
-- version last written to GitHub. label and body_sha256 are what whilly last wrote, so an
-- unchanged state costs no API call.
CREATE TABLE github_mirror (
    plan_id        text        PRIMARY KEY REFERENCES plans (id) ON DELETE CASCADE,
    version        bigint      NOT NULL DEFAULT 1,
    synced_version bigint      NOT NULL DEFAULT 0,
    label          text,
    body_sha256    bytea,
    synced_at      timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX github_mirror_dirty ON github_mirror (plan_id) WHERE version > synced_version;

-- Labels whilly created (or found) in a repository, so it checks each one once.
CREATE TABLE github_labels (
    repo       text        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo, name)
);

CREATE INDEX webhook_deliveries_received ON webhook_deliveries (received_at);
CREATE INDEX plans_github_issue_ref ON plans (github_issue_ref) WHERE github_issue_ref IS NOT NULL;
