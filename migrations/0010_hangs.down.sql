ALTER TABLE tasks DROP COLUMN last_output;
