DROP TABLE IF EXISTS sqllock_run_jobs;
DROP TABLE IF EXISTS sqllock_runs;
