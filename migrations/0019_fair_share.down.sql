DROP INDEX IF EXISTS plans_live_installation;
DROP INDEX IF EXISTS tasks_claim_fair;
CREATE INDEX IF NOT EXISTS tasks_claim_any ON tasks (priority_rank, plan_seq, ord) WHERE status = 'PENDING';
ALTER TABLE tasks DROP COLUMN IF EXISTS share_round;
