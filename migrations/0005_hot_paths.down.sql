DROP INDEX IF EXISTS tasks_claimed_by;
CREATE INDEX tasks_claimed_by ON tasks (claimed_by) WHERE claimed_by IS NOT NULL;
DROP INDEX IF EXISTS tasks_running;
CREATE INDEX tasks_plan_status ON tasks (plan_id, status);
DROP FUNCTION IF EXISTS whilly_require(boolean, text);
