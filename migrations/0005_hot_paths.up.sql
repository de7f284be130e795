-- whilly_require lets one statement give up, and its implicit transaction roll back with
-- everything it wrote, when an optimistic path turns out not to apply (SQLSTATE WH001,
-- the message says which). The caller then takes the careful path.
CREATE FUNCTION whilly_require(ok boolean, why text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	IF ok IS NOT TRUE THEN
		RAISE EXCEPTION USING ERRCODE = 'WH001', MESSAGE = why;
	END IF;
	RETURN true;
END
$$;

-- Completions are the hot path: a DONE task needs no entry in the indexes of running
-- tasks. "Is anything of this plan running?" and "what does this worker hold?" keep
-- their indexes, restricted to running tasks; counting a plan's tasks by status walks
-- its primary key.
DROP INDEX tasks_plan_status;
CREATE INDEX tasks_running ON tasks (plan_id) WHERE status IN ('CLAIMED', 'IN_PROGRESS');
DROP INDEX tasks_claimed_by;
CREATE INDEX tasks_claimed_by ON tasks (claimed_by) WHERE status IN ('CLAIMED', 'IN_PROGRESS');
