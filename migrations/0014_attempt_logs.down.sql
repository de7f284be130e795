DROP TABLE IF EXISTS attempt_log_chunks;
DROP TABLE IF EXISTS attempt_logs;
