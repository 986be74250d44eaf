-- Older versions of sqllock create rows at version 1: a name whose row was
-- reaped would start again there.
DROP TRIGGER IF EXISTS sqllock_versions_raise_floor;
DROP INDEX IF EXISTS sqllock_versions_expires_at_idx;
DROP TABLE IF EXISTS sqllock_version_floor;
