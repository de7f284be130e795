-- The previous failed attempt's error text and the tail of its output, for the next
-- attempt's prompt (last_error keeps the failure's class). Cleared when the task ends or
-- is reset.
ALTER TABLE tasks ADD COLUMN last_output text;
