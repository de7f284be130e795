ALTER TABLE github_mirror RESET (fillfactor);
CREATE INDEX github_mirror_dirty ON github_mirror (plan_id) WHERE version > synced_version;
