DROP TABLE IF EXISTS sqllock_versions;
