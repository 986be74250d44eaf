package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	sqllockdsn "github.com/sqllock/sqllock/dsn"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// The example takes the DSN forms the sqllock command takes: a MySQL URL
// and go-sql-driver/mysql's own form (with or without mysql://) reach the
// same server, as do a PostgreSQL URL and pgx keywords.
func TestOpenForms(t *testing.T) {
	t.Parallel()
	pg := dbtest.PostgresURL(t)
	my := dbtest.MySQLDSN(t)
	cfg, err := sqllockdsn.Parse(my)
	if err != nil {
		t.Fatal(err)
	}
	u := "mysql://" + cfg.MySQL.User
	if cfg.MySQL.Passwd != "" {
		u += ":" + cfg.MySQL.Passwd
	}
	u += "@" + cfg.MySQL.Addr + "/" + cfg.MySQL.DBName
	pcfg, err := sqllockdsn.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	p := pcfg.Postgres
	kw := "host=" + p.Host + " port=" + strconv.Itoa(int(p.Port)) + " user=" + p.User + " dbname=" + p.Database + " sslmode=disable"
	for _, dsn := range []string{pg, kw, my, "mysql://" + my, u} {
		if strings.HasPrefix(dsn, "postgres") || strings.HasPrefix(dsn, "host=") {
			dbtest.Postgres(t) // skips or fails as the suite does when the server is missing
		} else {
			dbtest.MySQL(t)
		}
		r, err := open(dsn, "replica-test")
		if err != nil {
			t.Fatalf("%s: %v", sqllockdsn.Redact(dsn), err)
		}
		err = r.db.PingContext(t.Context())
		r.db.Close()
		if err != nil {
			t.Fatalf("%s: %v", sqllockdsn.Redact(dsn), err)
		}
	}
}
