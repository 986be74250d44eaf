-- sqllock semaphores, limits set live (Semaphore.SetLimit), SQLite.
-- lim_fixed is 1 once a name's limit was set by SetLimit: every grant of
-- the name then counts against lim, whatever limit the Semaphore asking
-- was built with. While it is 0, the grant that finds the name without
-- live holders sets lim to its Semaphore's limit, and a grant beside
-- holders counts against the limit they were granted under.
--
-- SQLite has no ADD COLUMN IF NOT EXISTS: sqllock's migrator skips an
-- ADD COLUMN whose column exists.
ALTER TABLE sqllock_semaphores ADD COLUMN lim_fixed INTEGER NOT NULL DEFAULT 0;
