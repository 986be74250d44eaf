-- Older versions of sqllock create rows at version 1: a name whose row was
-- reaped would start again there.
DROP INDEX sqllock_versions_expires_at_idx ON sqllock_versions;
DROP TABLE IF EXISTS sqllock_version_floor;
