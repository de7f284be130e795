-- Attempt logs (issue 13): the agent output of each attempt, redacted by the worker and
-- streamed in chunks while the agent runs. Offsets are byte positions in the whole log as
-- the worker produced it; only its last 1 MiB is kept (queue.MaxAttemptLogBytes): each
-- append trims the chunks that fell out of that window in the same statement.

CREATE TABLE attempt_logs (
    plan_id    text        NOT NULL,
    task_id    text        NOT NULL,
    attempt    integer     NOT NULL CHECK (attempt >= 1),
    -- the lease whose worker writes the log; a later lease of the same attempt number (the
    -- attempt was released and claimed again, or the task was reset) starts it afresh
    lease_id   uuid        NOT NULL,
    -- where that lease's bytes begin: the worker's own offsets count from here
    base       bigint      NOT NULL DEFAULT 0 CHECK (base >= 0),
    -- how many bytes the log holds from its start, kept or trimmed; the next offset
    size       bigint      NOT NULL DEFAULT 0 CHECK (size >= base),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan_id, task_id, attempt),
    FOREIGN KEY (plan_id, task_id) REFERENCES tasks (plan_id, id) ON DELETE CASCADE
);

CREATE TABLE attempt_log_chunks (
    plan_id text    NOT NULL,
    task_id text    NOT NULL,
    attempt integer NOT NULL,
    pos     bigint  NOT NULL CHECK (pos >= 0), -- offset of the chunk's first byte
    data    bytea   NOT NULL,
    PRIMARY KEY (plan_id, task_id, attempt, pos),
    FOREIGN KEY (plan_id, task_id) REFERENCES tasks (plan_id, id) ON DELETE CASCADE
);
