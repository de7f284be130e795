DROP TRIGGER tasks_drop_logs ON tasks;
DROP FUNCTION whilly_tasks_drop_logs();
DELETE FROM attempt_log_chunks k WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.plan_id = k.plan_id AND t.id = k.task_id);
DELETE FROM attempt_logs l WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.plan_id = l.plan_id AND t.id = l.task_id);
ALTER TABLE attempt_logs ADD FOREIGN KEY (plan_id, task_id) REFERENCES tasks (plan_id, id) ON DELETE CASCADE;
ALTER TABLE attempt_log_chunks ADD FOREIGN KEY (plan_id, task_id) REFERENCES tasks (plan_id, id) ON DELETE CASCADE;
