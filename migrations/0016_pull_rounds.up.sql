-- The pull request answers back (issue 16): a review asking for changes, review comments
-- or a failing check suite on whilly's pull request add one follow-up task to the plan, a
-- "round". One row per round of a pull request, numbered from 2 (round 1 is the plan's
-- own work). A trigger (a review, a comment, a check suite, a /whilly retry) makes at most
-- one row, whatever redelivers it: the unique index on (repo, number, trigger, trigger_id).
-- A refused round (over WHILLY_PR_MAX_ROUNDS, or the budget spent) is recorded too, with
-- its reason, so that the status comment can say so and a redelivery refuses nothing more.
CREATE TABLE github_rounds (
    id         bigserial   PRIMARY KEY,
    plan_id    text        NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    repo       text        NOT NULL,
    number     integer     NOT NULL CHECK (number > 0),
    round      integer     NOT NULL CHECK (round >= 2),
    trigger    text        NOT NULL CHECK (trigger IN ('review', 'comment', 'check', 'retry')),
    trigger_id text        NOT NULL,
    head_sha   text,
    task_id    text,
    summary    text        NOT NULL,
    outcome    text        NOT NULL DEFAULT 'started' CHECK (outcome IN ('started', 'resolved', 'refused')),
    reason     text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX github_rounds_trigger ON github_rounds (lower(repo), number, trigger, trigger_id);
CREATE INDEX github_rounds_plan ON github_rounds (plan_id, round);

-- /whilly stop on the pull request: no more rounds (who stopped it).
ALTER TABLE github_pulls ADD COLUMN rounds_stopped_by text;

-- A round's task carries what its prompt says of the round: the number, what triggered
-- it, and the commits already on the branch (whilly's, from the plan's DONE tasks).
ALTER TABLE tasks ADD COLUMN round_context jsonb;
