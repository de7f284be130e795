-- github_mirror's row of a plan is updated by every change of the plan (markChangedSQL
-- bumps version in the change's transaction). The partial index github_mirror_dirty
-- (WHERE version > synced_version) made each of those updates a non-HOT one: a new entry
-- in it and in github_mirror_pkey for every task transition. In bench scale that is
-- 60,000 updates of 1,000 rows in two minutes; the index pages of those few rows became
-- the most contended buffers (LWLock:BufferContent) and marking the changed plans the
-- statement most often running while issues were labelled. Nothing reads the index: the
-- reconciler's list joins every mirror row with its plan. Without it the bump is a HOT
-- update, and free space in each page (fillfactor) keeps the new row version beside the
-- old one.
DROP INDEX github_mirror_dirty;
ALTER TABLE github_mirror SET (fillfactor = 50);
