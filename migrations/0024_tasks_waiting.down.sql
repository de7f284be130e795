DROP TRIGGER tasks_dependencies_changed ON tasks;
DROP FUNCTION whilly_tasks_dependencies_changed();
DROP TRIGGER tasks_unblock_on_insert ON tasks;
DROP TRIGGER tasks_unblock_on_finish ON tasks;
DROP FUNCTION whilly_tasks_unblock();
DROP INDEX tasks_waiting;
DROP INDEX tasks_claim_fair;
CREATE INDEX tasks_claim_fair ON tasks (priority_rank, share_round, plan_seq, ord) WHERE status = 'PENDING';
ALTER TABLE tasks DROP COLUMN waiting;
