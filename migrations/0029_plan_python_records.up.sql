-- A plan file of the Python system may carry its "origin" (where the plan came from) and
-- "repo_targets" (its repositories). whilly does not use them, but keeps them as the file
-- gave them, so that `whilly plan export` writes them back.
ALTER TABLE plans ADD COLUMN origin jsonb, ADD COLUMN repo_targets jsonb;
