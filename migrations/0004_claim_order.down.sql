DROP INDEX IF EXISTS tasks_plan_status;
DROP INDEX IF EXISTS tasks_claim_plan;
DROP INDEX IF EXISTS tasks_claim_any;
CREATE INDEX tasks_pending ON tasks (priority_rank, plan_id, ord) WHERE status = 'PENDING';
ALTER TABLE tasks DROP COLUMN plan_seq;
ALTER TABLE plans DROP COLUMN seq;
