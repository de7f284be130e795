-- Claims walk an index in claim order (priority, plan age, file order) and stop at the
-- first claimable task, instead of sorting every pending task: plans get a sequence
-- number (their age), copied onto their tasks so one index can hold the whole order.
ALTER TABLE plans ADD COLUMN seq bigserial;
ALTER TABLE tasks ADD COLUMN plan_seq bigint NOT NULL DEFAULT 0;
UPDATE tasks t SET plan_seq = p.seq FROM plans p WHERE p.id = t.plan_id;

DROP INDEX tasks_pending;
CREATE INDEX tasks_claim_any ON tasks (priority_rank, plan_seq, ord) WHERE status = 'PENDING';
CREATE INDEX tasks_claim_plan ON tasks (plan_id, priority_rank, ord) WHERE status = 'PENDING';

-- "Is anything of this plan still running?" without counting every task.
CREATE INDEX tasks_plan_status ON tasks (plan_id, status);
