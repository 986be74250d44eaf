package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// privileges reports the privileges on sqllock's tables that the user
// lacks: SELECT, INSERT, UPDATE and DELETE on every table (and USAGE,
// SELECT and UPDATE on every sequence, on PostgreSQL). That is all a
// command needs; migrations need the schema's owner, but once the schema
// is up to date, migrate up (and a service's start-up) needs no more.
func (t *target) privileges(ctx context.Context) finding {
	var (
		missing []string
		err     error
	)
	switch t.d.Name() {
	case "postgres":
		missing, err = t.pgPrivileges(ctx)
	default: // MySQL, MariaDB, TiDB
		missing, err = t.mysqlPrivileges(ctx)
	}
	switch {
	case err != nil:
		return found("privileges", statusProblem, "cannot check them: %v", message(err))
	case len(missing) > 0:
		return found("privileges", statusMissing, "this user lacks %s: commands that need them fail "+
			"(an application needs SELECT, INSERT, UPDATE and DELETE on every sqllock table; "+
			"see \"Least privilege\" in docs/databases.md)", strings.Join(missing, "; "))
	}
	return found("privileges", statusOK, "SELECT, INSERT, UPDATE and DELETE on every sqllock table")
}

// pgPrivileges lists, per table or sequence of the schema whose name
// starts with sqllock_, the privileges the user lacks.
func (t *target) pgPrivileges(ctx context.Context) ([]string, error) {
	schema := ""
	if d, ok := t.d.(interface{ Schema() string }); ok {
		schema = d.Schema()
	}
	rows, err := t.db.QueryContext(ctx, `SELECT c.relname,
  CASE WHEN c.relkind = 'S' THEN concat_ws(', ',
      CASE WHEN NOT has_sequence_privilege(c.oid, 'USAGE') THEN 'USAGE' END,
      CASE WHEN NOT has_sequence_privilege(c.oid, 'SELECT') THEN 'SELECT' END,
      CASE WHEN NOT has_sequence_privilege(c.oid, 'UPDATE') THEN 'UPDATE' END)
    ELSE concat_ws(', ',
      CASE WHEN NOT has_table_privilege(c.oid, 'SELECT') THEN 'SELECT' END,
      CASE WHEN NOT has_table_privilege(c.oid, 'INSERT') THEN 'INSERT' END,
      CASE WHEN NOT has_table_privilege(c.oid, 'UPDATE') THEN 'UPDATE' END,
      CASE WHEN NOT has_table_privilege(c.oid, 'DELETE') THEN 'DELETE' END)
  END,
  NOT has_schema_privilege(n.oid, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = COALESCE(NULLIF($1, ''), current_schema())
  AND c.relname LIKE 'sqllock\_%' AND c.relkind IN ('r', 'p', 'S')
ORDER BY c.relname`, schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var missing []string
	noUsage := false
	for rows.Next() {
		var (
			name, lacks string
			usage       bool
		)
		if err := rows.Scan(&name, &lacks, &usage); err != nil {
			return nil, err
		}
		noUsage = noUsage || usage
		if lacks != "" {
			missing = append(missing, lacks+" on "+name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if noUsage {
		missing = append([]string{"USAGE on the schema"}, missing...)
	}
	return missing, nil
}

// mysqlPrivileges lists, per table of the migrations (those that exist),
// the privileges the user lacks, found by statements that change no row,
// in a transaction that is rolled back: a privilege granted through a role
// or on the whole database counts as any other.
func (t *target) mysqlPrivileges(ctx context.Context) ([]string, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var missing []string
	for _, table := range migrationTables(t.d.Migrations()) {
		q := quoteMySQL(table)
		if db, ok := t.d.(interface{ Database() string }); ok && db.Database() != "" {
			q = quoteMySQL(db.Database()) + "." + q
		}
		lacks, err := mysqlLacks(ctx, conn, q)
		if err != nil {
			return nil, err
		}
		if lacks != nil {
			missing = append(missing, strings.Join(lacks, ", ")+" on "+table)
		}
	}
	return missing, nil
}

// mysqlLacks returns the privileges among SELECT, INSERT, UPDATE and DELETE
// that conn's user lacks on table; none for a table that does not exist
// (the schema check reports an outdated schema).
func mysqlLacks(ctx context.Context, conn *sql.Conn, table string) ([]string, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var lacks []string
	rows, err := tx.QueryContext(ctx, "SELECT * FROM "+table+" LIMIT 0")
	var columns []string
	switch {
	case mysqlErr(err, 1146): // no such table
		return nil, nil
	case mysqlErr(err, 1142, 1143): // command denied for the table, a column
		lacks = append(lacks, "SELECT")
		name := strings.Trim(table[strings.LastIndex(table, ".")+1:], "`")
		rows, err := tx.QueryContext(ctx, `SELECT column_name FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`, name)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				return nil, err
			}
			columns = append(columns, c)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(columns) == 0 { // not even visible
			return []string{"SELECT, INSERT, UPDATE, DELETE"}, nil
		}
	case err != nil:
		return nil, err
	default:
		columns, err = rows.Columns()
		rows.Close()
		if err != nil || len(columns) == 0 {
			return nil, err
		}
	}
	cs, nulls := make([]string, len(columns)), make([]string, len(columns))
	for i, c := range columns {
		cs[i], nulls[i] = quoteMySQL(c), "NULL"
	}
	c := cs[0]
	for _, p := range []struct{ priv, q string }{
		{"INSERT", "INSERT INTO " + table + " (" + strings.Join(cs, ", ") + ") SELECT " + strings.Join(nulls, ", ") + " FROM DUAL WHERE FALSE"},
		{"UPDATE", "UPDATE " + table + " SET " + c + " = NULL WHERE FALSE"},
		{"DELETE", "DELETE FROM " + table + " WHERE FALSE"},
	} {
		_, err := tx.ExecContext(ctx, p.q)
		switch {
		case mysqlErr(err, 1142, 1143):
			lacks = append(lacks, p.priv)
		case err != nil:
			return nil, fmt.Errorf("%s: %w", p.q, err)
		}
	}
	return lacks, nil
}

// mysqlErr reports whether err is a MySQL error of one of the numbers.
func mysqlErr(err error, numbers ...int) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && slices.Contains(numbers, int(me.Number))
}

// quoteMySQL backquotes a name.
func quoteMySQL(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// createdTable and droppedTable find the tables an up migration creates
// and drops.
var (
	createdTable = regexp.MustCompile("(?i)CREATE\\s+TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?`?(\\w+)")
	droppedTable = regexp.MustCompile("(?i)DROP\\s+TABLE\\s+(?:IF\\s+EXISTS\\s+)?`?(\\w+)")
)

// migrationTables returns the tables that the up migrations of files
// leave, in the order they are created, and the version table.
func migrationTables(files fs.FS) []string {
	ups, _ := fs.Glob(files, "*.up.sql")
	version := func(name string) int {
		head, _, _ := strings.Cut(name, "_")
		v, _ := strconv.Atoi(head)
		return v
	}
	slices.SortFunc(ups, func(a, b string) int { return version(a) - version(b) })
	tables := []string{"sqllock_schema_migrations"}
	for _, f := range ups {
		body, err := fs.ReadFile(files, f)
		if err != nil {
			continue
		}
		for _, m := range createdTable.FindAllSubmatch(body, -1) {
			if name := string(m[1]); !slices.Contains(tables, name) {
				tables = append(tables, name)
			}
		}
		for _, m := range droppedTable.FindAllSubmatch(body, -1) {
			tables = slices.DeleteFunc(tables, func(s string) bool { return s == string(m[1]) })
		}
	}
	return tables
}
