-- Attempt logs are tied to their task by this trigger instead of foreign keys. Checking a
-- foreign key cost every log write a look-up and a row lock of its task, two per
-- completion that carries its log's tail: about as much as storing the tail itself. No
-- check is needed: every statement that writes a log reads the task under its live lease
-- in its own transaction (its row is locked or just written), so a log never lacks its
-- task. Removing tasks removes their logs, as the keys' ON DELETE CASCADE did.
ALTER TABLE attempt_log_chunks DROP CONSTRAINT attempt_log_chunks_plan_id_task_id_fkey;
ALTER TABLE attempt_logs DROP CONSTRAINT attempt_logs_plan_id_task_id_fkey;

CREATE FUNCTION whilly_tasks_drop_logs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM attempt_log_chunks k USING gone g WHERE k.plan_id = g.plan_id AND k.task_id = g.id;
	DELETE FROM attempt_logs l USING gone g WHERE l.plan_id = g.plan_id AND l.task_id = g.id;
	RETURN NULL;
END $$;

CREATE TRIGGER tasks_drop_logs AFTER DELETE ON tasks REFERENCING OLD TABLE AS gone
	FOR EACH STATEMENT EXECUTE FUNCTION whilly_tasks_drop_logs();
