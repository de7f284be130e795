-- Global pause: one row, read by every claim. While paused is true no task is
-- claimed anywhere; running attempts finish. Who paused it and when, for the dashboard
-- and `whilly pause`; the events system.paused / system.resumed are the audit trail.
CREATE TABLE fleet (
    one       boolean     PRIMARY KEY DEFAULT true CHECK (one),
    paused    boolean     NOT NULL DEFAULT false,
    paused_by text,
    paused_at timestamptz
);

INSERT INTO fleet DEFAULT VALUES;
