ALTER TABLE sqllock_semaphores DROP COLUMN lim_fixed;
