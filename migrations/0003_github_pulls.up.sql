-- From issue to pull request: the pull request of each GitHub plan, and the
-- repository_dispatch events sent to start GitHub Actions workers.

-- The pull request a plan's commits are delivered in: one per plan, from the issue's
-- branch (whilly/issue-N) to the repository's default branch. A second intake of the same
-- issue finds the open pull request of that branch and records it again for its plan.
-- state follows GitHub (pull_request webhooks, the reconciler); body_sha256 is what the
-- mirror last wrote, so an unchanged checklist costs no API call.
CREATE TABLE github_pulls (
    plan_id     text        PRIMARY KEY REFERENCES plans (id) ON DELETE CASCADE,
    repo        text        NOT NULL,
    number      integer     NOT NULL CHECK (number > 0),
    node_id     text        NOT NULL,
    url         text        NOT NULL,
    branch      text        NOT NULL,
    state       text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'closed', 'merged')),
    draft       boolean     NOT NULL DEFAULT true,
    body_sha256 bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX github_pulls_number ON github_pulls (lower(repo), number);

-- repository_dispatch (whilly-work) events, one row each. A plan's start dispatches
-- exactly once (the partial unique index; the row and its River job are written in the
-- transaction that creates the plan); the reconciler may add 'idle' rows for a plan
-- whose ready tasks nobody runs, at most one per interval.
CREATE TABLE github_dispatches (
    id         bigserial   PRIMARY KEY,
    plan_id    text        NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    reason     text        NOT NULL CHECK (reason IN ('start', 'idle')),
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz,
    outcome    text
);

CREATE UNIQUE INDEX github_dispatches_one_start ON github_dispatches (plan_id) WHERE reason = 'start';
CREATE INDEX github_dispatches_plan ON github_dispatches (plan_id, created_at);
