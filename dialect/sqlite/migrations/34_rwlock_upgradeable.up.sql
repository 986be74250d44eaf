-- sqllock read/write locks, upgradeable reads (RWLock.AcquireUpgradeable,
-- Lock.Upgrade), SQLite. upgradeable is 1 on the holder row of an
-- upgradeable read (shared is 1 too): it coexists with plain readers, and
-- keeps writers and other upgradeable readers out, until its owner turns
-- it into the write lease (shared and upgradeable 0, same token) or
-- releases it.
--
-- SQLite has no ADD COLUMN IF NOT EXISTS: sqllock's migrator skips an
-- ADD COLUMN whose column exists.
ALTER TABLE sqllock_rwlock_holders ADD COLUMN upgradeable INTEGER NOT NULL DEFAULT 0;
