-- The lease its holder ended with a report (COMPLETE, FAIL, RELEASE): a report retried
-- after its answer was lost finds its lease here and is answered with the task as it is,
-- instead of 409, and a late charge of the same attempt is refused as already charged.
-- Leases ended by the reaper, a revocation or a cancel are not recorded: their holder's
-- report was never accepted.
ALTER TABLE tasks ADD COLUMN ended_lease_id uuid;

-- Event cursors must never pass over an event whose transaction commits late. An event's
-- id is taken after its transaction has an xid (whilly_event_id), and horizon records the
-- first xid not yet assigned when the row was written. A missing id below an event k can
-- only belong to a transaction whose xid is below k's horizon: when the oldest
-- transaction still running (pg_snapshot_xmin) is at or above k's horizon, every id below
-- k is settled (committed and visible, or rolled back for good). Readers hand out ids only
-- below the first gap that is not settled (queue.Store.EventPage).
CREATE FUNCTION whilly_event_id() RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN nextval('events_id_seq');
END;
$$;
ALTER TABLE events ALTER COLUMN id SET DEFAULT whilly_event_id();
-- Rows written before this migration have none: they are settled.
ALTER TABLE events ADD COLUMN horizon xid8;
ALTER TABLE events ALTER COLUMN horizon SET DEFAULT pg_snapshot_xmax(pg_current_snapshot());
