DROP TABLE github_mirror_locks;
