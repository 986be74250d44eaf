ALTER TABLE sqllock_semaphores DROP COLUMN IF EXISTS ticketed;
ALTER TABLE sqllock_locks DROP COLUMN IF EXISTS ticketed;
