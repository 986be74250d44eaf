-- sqllock read/write locks, upgradeable reads (RWLock.AcquireUpgradeable,
-- Lock.Upgrade), PostgreSQL. upgradeable is true on the holder row of an
-- upgradeable read (shared is true too): it coexists with plain readers,
-- and keeps writers and other upgradeable readers out, until its owner
-- turns it into the write lease (shared and upgradeable false, same
-- token) or releases it.
ALTER TABLE sqllock_rwlock_holders ADD COLUMN IF NOT EXISTS upgradeable boolean NOT NULL DEFAULT false;
