-- A hint that some process waited for the lock: release and the reaper then
-- announce the name with NOTIFY. Only contended names pay for NOTIFY, whose
-- commit serialises on a cluster-wide lock. The hint stays set until the
-- row is reaped.
ALTER TABLE sqllock_locks ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;
