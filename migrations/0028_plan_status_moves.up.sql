-- A plan's status changes only as package plan allows (plan.PlanMove): a live plan
-- (ACTIVE, PAUSED) is paused, resumed and ends; an ended one is reopened (ACTIVE, or PAUSED
-- for approval), a DONE one fails when its follow-up round is refused, a FAILED one can be
-- cancelled. Any other change is refused here (SQLSTATE WH002), whoever writes it; a
-- test tries every pair of statuses against plan.PlanMove.
CREATE FUNCTION whilly_plan_status_move() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) NOT IN (
        ('ACTIVE', 'PAUSED'), ('ACTIVE', 'DONE'), ('ACTIVE', 'FAILED'), ('ACTIVE', 'CANCELLED'),
        ('PAUSED', 'ACTIVE'), ('PAUSED', 'DONE'), ('PAUSED', 'FAILED'), ('PAUSED', 'CANCELLED'),
        ('DONE', 'ACTIVE'), ('DONE', 'PAUSED'), ('DONE', 'FAILED'),
        ('FAILED', 'ACTIVE'), ('FAILED', 'PAUSED'), ('FAILED', 'CANCELLED'),
        ('CANCELLED', 'ACTIVE')) THEN
        RAISE EXCEPTION USING ERRCODE = 'WH002',
            MESSAGE = format('plan %s cannot go from %s to %s', NEW.id, OLD.status, NEW.status);
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER plans_status_move BEFORE UPDATE OF status ON plans FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION whilly_plan_status_move();
