package dbtest

import (
	"context"
	"net/url"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// Role is what a database role of the test's own may do on sqllock's
// tables: the grants of the least-privilege set-up that docs/databases.md
// describes.
type Role int

const (
	// App may read and write the tables, and nothing else: SELECT,
	// INSERT, UPDATE and DELETE on them (and USAGE, SELECT and UPDATE on
	// the sequences, on PostgreSQL).
	App Role = iota
	// Viewer may read them: SELECT.
	Viewer
	// Caller may run the protocol's functions (docs/protocol.md) and
	// nothing else: EXECUTE on them, no privilege on the tables (on
	// MySQL/MariaDB, on the protocol's procedures).
	Caller
)

// pgGrants are the statements that give role r's privileges on schema's
// tables (already migrated) to name.
func pgGrants(r Role, schema, name string) []string {
	s, n := `"`+schema+`"`, `"`+name+`"`
	g := []string{`GRANT USAGE ON SCHEMA ` + s + ` TO ` + n}
	switch r {
	case App:
		g = append(g,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+s+` TO `+n,
			`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA `+s+` TO `+n)
	case Viewer:
		g = append(g, `GRANT SELECT ON ALL TABLES IN SCHEMA `+s+` TO `+n)
	case Caller:
		g = append(g, `GRANT EXECUTE ON FUNCTION `+s+`.sqllock_try_acquire(text, text, interval), `+
			s+`.sqllock_renew(text, text, bigint, interval), `+s+`.sqllock_release(text, text, bigint), `+
			s+`.sqllock_guard(text, text, bigint), `+s+`.sqllock_remaining(text) TO `+n)
	}
	return g
}

// PostgresRole creates a login role of the test's own on the PostgreSQL
// test server with r's privileges on the tables of schema (which must be
// migrated already), dropped when the test ends, and returns the server's
// URL with that role as its user. The server must let the role in without
// a password (trust), as the test servers do.
func PostgresRole(t testing.TB, schema string, r Role) string {
	t.Helper()
	db, u := pgDB.get(t)
	name := "r_" + newName()[2:]
	exec := func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	}
	ddl(t, `CREATE ROLE "`+name+`" LOGIN`, exec)
	// Cleanups run in reverse, before the schema's (registered earlier):
	// the role's grants go, then the role.
	cleanupDDL(t, `DROP ROLE IF EXISTS "`+name+`"`, exec)
	cleanupDDL(t, `DROP OWNED BY "`+name+`"`, exec)
	for _, q := range pgGrants(r, schema, name) {
		ddl(t, q, exec)
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", redactURL(u), err)
	}
	parsed.User = url.User(name)
	return parsed.String()
}

// MySQLRole creates a user of the test's own on the MySQL/MariaDB test
// server with r's privileges on database (SELECT, INSERT, UPDATE and
// DELETE on every table of it; SELECT for a Viewer; EXECUTE on the
// protocol's procedures alone for a Caller, which database must have
// already), dropped when the test ends, and returns the server's DSN with
// that user, no password, and database as its default database.
func MySQLRole(t testing.TB, database string, r Role) string {
	t.Helper()
	db, dsn := myDB.get(t)
	name := "r_" + newName()[2:]
	exec := func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	}
	user := "'" + name + "'@'%'"
	ddl(t, `CREATE USER `+user, exec)
	cleanupDDL(t, `DROP USER IF EXISTS `+user, exec)
	for _, q := range mysqlGrants(r, database, user) {
		ddl(t, q, exec)
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", redactDSN(dsn), err)
	}
	cfg.User, cfg.Passwd, cfg.DBName = name, "", database
	return cfg.FormatDSN()
}

// mysqlGrants are the statements that give role r's privileges on
// database (already migrated, for a Caller) to user.
func mysqlGrants(r Role, database, user string) []string {
	db := "`" + database + "`"
	switch r {
	case Viewer:
		return []string{"GRANT SELECT ON " + db + ".* TO " + user}
	case Caller:
		var g []string
		for _, p := range []string{"sqllock_try_acquire", "sqllock_renew", "sqllock_release", "sqllock_guard", "sqllock_remaining"} {
			g = append(g, "GRANT EXECUTE ON PROCEDURE "+db+"."+p+" TO "+user)
		}
		return g
	}
	return []string{"GRANT SELECT, INSERT, UPDATE, DELETE ON " + db + ".* TO " + user}
}
