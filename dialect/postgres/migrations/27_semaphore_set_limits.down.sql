ALTER TABLE sqllock_semaphores DROP COLUMN IF EXISTS lim_fixed;
