-- sqllock semaphores, limits set live (Semaphore.SetLimit), PostgreSQL.
-- lim_fixed is true once a name's limit was set by SetLimit: every grant
-- of the name then counts against lim, whatever limit the Semaphore
-- asking was built with. While it is false, the grant that finds the name
-- without live holders sets lim to its Semaphore's limit, and a grant
-- beside holders counts against the limit they were granted under.
ALTER TABLE sqllock_semaphores ADD COLUMN IF NOT EXISTS lim_fixed boolean NOT NULL DEFAULT false;
