-- Fair share (issue 15): within a priority, claims rotate across plans instead of draining
-- the oldest plan first. Each task gets a round when it is inserted: its plan starts at
-- the round the claim walk has reached (the first claimable task of that priority), and
-- its tasks of one priority step one round each, or m rounds when its installation has m
-- live plans (plans without an installation count as one), so that one installation's
-- many plans share what one plan of another gets. Claims walk (priority, round, plan age,
-- file order): a plan with one ready task is served within one round of claims whatever
-- else is queued, and a claim still stops at the first claimable tasks.
ALTER TABLE tasks ADD COLUMN share_round bigint NOT NULL DEFAULT 0;
UPDATE tasks t SET share_round = r.k
FROM (SELECT plan_id, id, row_number() OVER (PARTITION BY plan_id, priority_rank ORDER BY ord) - 1 AS k
      FROM tasks WHERE status = 'PENDING') r
WHERE t.plan_id = r.plan_id AND t.id = r.id;

DROP INDEX tasks_claim_any;
CREATE INDEX tasks_claim_fair ON tasks (priority_rank, share_round, plan_seq, ord) WHERE status = 'PENDING';

-- The live plans of an installation, counted when a plan's tasks are inserted.
CREATE INDEX plans_live_installation ON plans (installation_id) WHERE status IN ('ACTIVE', 'PAUSED');
