DROP TRIGGER IF EXISTS plans_status_move ON plans;
DROP FUNCTION IF EXISTS whilly_plan_status_move();
