DROP TABLE IF EXISTS sqllock_latches;
