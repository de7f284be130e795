-- When a change of the plan last enqueued its mirror job: a change enqueues one only when
-- none is known to wait (NULL, or so old that the job may have been lost), so that a busy
-- plan's changes cost no job insert each. A mirror run that finds nothing left clears it.
ALTER TABLE github_mirror ADD COLUMN job_at timestamptz;
