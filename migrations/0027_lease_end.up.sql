-- How its holder ended the lease of ended_lease_id: the report (COMPLETE, FAIL, RELEASE)
-- that ended it. Only the same report again is a replay, answered with the task; any
-- other report on that lease is refused (409). Leases ended before this column existed
-- have none, and any report on them is still taken as a replay.
ALTER TABLE tasks ADD COLUMN ended_by text CHECK (ended_by IN ('COMPLETE', 'FAIL', 'RELEASE'));
