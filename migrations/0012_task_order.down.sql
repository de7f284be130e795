DROP INDEX IF EXISTS tasks_plan_order;
