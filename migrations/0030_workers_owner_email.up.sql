-- The operator who registered a worker: the owner of the bootstrap token it registered
-- with, or what the registration said (`whilly worker register --owner`). Carried in the
-- worker's CLAIM events, so a task's history says whose machine ran it.
ALTER TABLE workers ADD COLUMN owner_email text;
