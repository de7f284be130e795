ALTER TABLE workers DROP COLUMN owner_email;
