package mysql

// For the tests of package mysql_test.
const MigrationLockName = migrationLockName

var IsTiDB = isTiDB

var WrapTiDB = wrapTiDB
