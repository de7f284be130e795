-- Waiting tasks (issue 15): a pending task with a dependency that is not DONE or SKIPPED
-- is marked waiting, and the claim order (tasks_claim_fair) leaves it out. An issue's task
-- list is a chain: with hundreds of plans live, most pending tasks wait on a running one,
-- and every claim and every import's fair-share walk passed over them (in bench scale, a
-- claim 1.6 ms and an import 13 ms). Claims still check the dependencies.
--
-- waiting is kept one-sided: it is true only while some dependency is unfinished. An
-- import sets it (queue.insertTasks); the trigger below clears it for the dependents of a
-- task that becomes DONE or SKIPPED, once all their dependencies are; a change of a
-- task's dependencies clears it (the claim's own check then decides). A task that is
-- wrongly not waiting costs a claim a look; one wrongly waiting would never run, so
-- every path that could leave one errs the other way. Finishing a task and importing
-- tasks that depend on it take the plan's advisory lock 'whilly:deps:<plan>' and read
-- after it, so neither misses the other (two dependencies finishing at once, or an
-- import next to a completion, each read the other's commit).
ALTER TABLE tasks ADD COLUMN waiting boolean NOT NULL DEFAULT false;
DROP INDEX tasks_claim_fair;
CREATE INDEX tasks_claim_fair ON tasks (priority_rank, share_round, plan_seq, ord) WHERE status = 'PENDING' AND NOT waiting;
CREATE INDEX tasks_waiting ON tasks (plan_id) WHERE waiting;

CREATE FUNCTION whilly_tasks_unblock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended('whilly:deps:' || NEW.plan_id, 0));
	-- A statement of its own: it reads what committed while the lock was awaited.
	UPDATE tasks t SET waiting = false
	WHERE t.plan_id = NEW.plan_id AND t.waiting AND NEW.id = ANY (t.dependencies)
	  AND NOT EXISTS (SELECT 1 FROM unnest(t.dependencies) AS d(dep)
		WHERE coalesce((SELECT x.status FROM tasks x WHERE x.plan_id = t.plan_id AND x.id = d.dep), '') NOT IN ('DONE', 'SKIPPED'));
	RETURN NULL;
END $$;

CREATE TRIGGER tasks_unblock_on_finish AFTER UPDATE OF status ON tasks FOR EACH ROW
	WHEN (NEW.status IN ('DONE', 'SKIPPED') AND OLD.status NOT IN ('DONE', 'SKIPPED'))
	EXECUTE FUNCTION whilly_tasks_unblock();
CREATE TRIGGER tasks_unblock_on_insert AFTER INSERT ON tasks FOR EACH ROW
	WHEN (NEW.status IN ('DONE', 'SKIPPED'))
	EXECUTE FUNCTION whilly_tasks_unblock();

CREATE FUNCTION whilly_tasks_dependencies_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.waiting := false;
	RETURN NEW;
END $$;

CREATE TRIGGER tasks_dependencies_changed BEFORE UPDATE OF dependencies ON tasks FOR EACH ROW
	WHEN (NEW.dependencies IS DISTINCT FROM OLD.dependencies)
	EXECUTE FUNCTION whilly_tasks_dependencies_changed();
