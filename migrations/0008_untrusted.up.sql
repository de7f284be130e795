-- Issue comment commands run once per comment: the first delivery that carries
-- a comment owns its command; a replay of the signed payload under a new delivery id finds
-- the comment here and runs nothing. Rows are kept: a replay may come at any time.
CREATE TABLE github_commands (
    comment_id  bigint PRIMARY KEY,
    delivery_id text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
