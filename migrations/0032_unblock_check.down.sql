CREATE OR REPLACE FUNCTION whilly_tasks_unblock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('whilly:deps:' || NEW.plan_id, 0));
	-- A statement of its own: it reads what committed while the lock was awaited.
	UPDATE tasks t SET waiting = false
	WHERE t.plan_id = NEW.plan_id AND t.waiting AND NEW.id = ANY (t.dependencies)
	  AND NOT EXISTS (SELECT 1 FROM unnest(t.dependencies) AS d(dep)
		WHERE coalesce((SELECT x.status FROM tasks x WHERE x.plan_id = t.plan_id AND x.id = d.dep), '') NOT IN ('DONE', 'SKIPPED'));
	RETURN NULL;
END $$;
