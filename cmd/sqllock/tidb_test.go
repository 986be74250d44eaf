package main

import (
	"net/url"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/internal/dbtest"
)

// A tidb:// DSN opens the TiDB dialect (whose statements run on MySQL and
// MariaDB too), a mysql:// one the MySQL dialect, on the same server.
func TestOpenTargetTiDB(t *testing.T) {
	t.Parallel()
	c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Host: c.Addr, Path: "/" + c.DBName, User: url.User(c.User)}
	if c.Passwd != "" {
		u.User = url.UserPassword(c.User, c.Passwd)
	}
	for scheme, want := range map[string]string{"tidb": "tidb", "mysql": "mysql"} {
		u.Scheme = scheme
		tg, err := openTarget(t.Context(), u.String(), "")
		if err != nil {
			t.Fatalf("%s: %v", redact(u.String()), err)
		}
		if got := tg.d.Name(); got != want {
			t.Errorf("%s: dialect %q, want %q", redact(u.String()), got, want)
		}
		if err := tg.Close(); err != nil {
			t.Error(err)
		}
	}
}
