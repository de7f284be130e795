DROP TABLE IF EXISTS github_delivery_cursor;
