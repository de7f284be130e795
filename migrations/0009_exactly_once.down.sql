ALTER TABLE events ALTER COLUMN id SET DEFAULT nextval('events_id_seq'::regclass);
DROP FUNCTION IF EXISTS whilly_event_id();
ALTER TABLE tasks DROP COLUMN IF EXISTS ended_lease_id;
