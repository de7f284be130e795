-- A finished task clears waiting on its dependents (migration 0024) with an UPDATE only
-- when one of them waits: starting an UPDATE of tasks (its indexes, its generated column)
-- for nothing was most of what the trigger cost each completion, and most completions
-- have no waiting dependent. The check runs after the lock, in a statement of its own,
-- so it sees what the UPDATE would.
CREATE OR REPLACE FUNCTION whilly_tasks_unblock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('whilly:deps:' || NEW.plan_id, 0));
	IF NOT EXISTS (SELECT 1 FROM tasks t WHERE t.plan_id = NEW.plan_id AND t.waiting AND NEW.id = ANY (t.dependencies)) THEN
		RETURN NULL;
	END IF;
	UPDATE tasks t SET waiting = false
	WHERE t.plan_id = NEW.plan_id AND t.waiting AND NEW.id = ANY (t.dependencies)
	  AND NOT EXISTS (SELECT 1 FROM unnest(t.dependencies) AS d(dep)
		WHERE coalesce((SELECT x.status FROM tasks x WHERE x.plan_id = t.plan_id AND x.id = d.dep), '') NOT IN ('DONE', 'SKIPPED'));
	RETURN NULL;
END $$;
