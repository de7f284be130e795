-- A plan's tasks in file order: the task list's pages (GET /v1/plans/{plan}/tasks), plan
-- show and exports walk (plan_id, ord); without this index every page sorted all of the
-- plan's tasks (130-160 ms a page on a 100,000-task plan).
CREATE INDEX tasks_plan_order ON tasks (plan_id, ord);
