DROP TABLE IF EXISTS sqllock_barrier_members;
DROP TABLE IF EXISTS sqllock_barriers;
