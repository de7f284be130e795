DROP INDEX IF EXISTS tasks_backoff;
