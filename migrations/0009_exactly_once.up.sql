-- The lease its holder ended with a report (COMPLETE, FAIL, RELEASE): a report retried
-- after its answer was lost finds its lease here and is answered with the task as it is,
-- instead of 409, and a late charge of the same attempt is refused as already charged.
-- Leases ended by the reaper, a revocation or a cancel are not recorded: their holder's
-- report was never accepted.
ALTER TABLE tasks ADD COLUMN ended_lease_id uuid;

-- Event cursors must never pass over an event whose transaction commits late. Before a
-- transaction takes its first event id, it announces a floor under every id it will take:
-- a shared advisory lock (held until it ends) whose 64-bit key is the sequence's next
-- value. Readers hand out only ids below the lowest floor announced by a transaction in
-- flight (queue.unsettledSQL reads them from pg_locks). The floor is announced before the
-- id is drawn, so a reader that does not see it yet cannot have seen a later id either.
-- This needs the sequence's CACHE at 1 (bigserial's default): ids drawn in time order.
CREATE FUNCTION whilly_event_id() RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('whilly.event_floor', true), '') = '' THEN
        PERFORM pg_advisory_xact_lock_shared(
            (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM events_id_seq));
        PERFORM set_config('whilly.event_floor', 'on', true);
    END IF;
    RETURN nextval('events_id_seq');
END;
$$;
ALTER TABLE events ALTER COLUMN id SET DEFAULT whilly_event_id();
