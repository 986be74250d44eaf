package dsn

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every form of the package documentation, and what it says.
func TestParseForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in                               string
		driver, user, pass, addr, db, sc string
	}{
		{"postgres://app:pw@db:5433/shop?sslmode=disable", "postgres", "app", "pw", "db:5433", "shop", ""},
		{"postgresql://app@db/shop?sslmode=disable&schema=ops", "postgres", "app", "", "db:5432", "shop", "ops"},
		{"host=db port=5433 user=app password=pw dbname=shop sslmode=disable", "postgres", "app", "pw", "db:5433", "shop", ""},
		{"host=db user=app dbname=shop schema=ops sslmode=disable", "postgres", "app", "", "db:5432", "shop", "ops"},
		{"mysql://app:pw@db:3307/shop?parseTime=true", "mysql", "app", "pw", "db:3307", "shop", "shop"},
		{"mysql://app@db/shop", "mysql", "app", "", "db:3306", "shop", "shop"},
		{"mysql://app:pw@tcp(db:3307)/shop?parseTime=true", "mysql", "app", "pw", "db:3307", "shop", "shop"},
		{"app:pw@tcp(db:3307)/shop", "mysql", "app", "pw", "db:3307", "shop", "shop"},
		{"root@tcp(127.0.0.1:3306)/test", "mysql", "root", "", "127.0.0.1:3306", "test", "test"},
		{"app@unix(/run/mysqld/mysqld.sock)/shop", "mysql", "app", "", "/run/mysqld/mysqld.sock", "shop", "shop"},
		{"sqlite:/var/lib/locks.db", "sqlite", "", "", "", "/var/lib/locks.db", ""},
		{"sqlite:///var/lib/locks.db", "sqlite", "", "", "", "/var/lib/locks.db", ""},
	} {
		cfg, err := Parse(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		var user, pass, addr, db string
		switch cfg.Driver {
		case "postgres":
			p := cfg.Postgres
			user, pass, addr, db = p.User, p.Password, p.Host+":"+itoa(p.Port), p.Database
			if _, ok := p.RuntimeParams["schema"]; ok {
				t.Errorf("%s: schema sent to the server as a runtime parameter", c.in)
			}
		case "mysql":
			m := cfg.MySQL
			user, pass, addr, db = m.User, m.Passwd, m.Addr, m.DBName
		case "sqlite":
			db = cfg.Path
		}
		if cfg.Driver != c.driver || user != c.user || pass != c.pass || addr != c.addr || db != c.db || cfg.Schema != c.sc {
			t.Errorf("%s: %s user %q pass %q addr %q db %q schema %q; want %s %q %q %q %q %q",
				c.in, cfg.Driver, user, pass, addr, db, cfg.Schema, c.driver, c.user, c.pass, c.addr, c.db, c.sc)
		}
		if c.pass != "" && strings.Contains(cfg.String(), c.pass) {
			t.Errorf("%s: String() shows the password: %s", c.in, cfg)
		}
	}
}

func itoa(n uint16) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// What is not a DSN, and DSNs with mistakes, are *Error that never show
// the password.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "oracle://x", "just words", "sqlite:", "mysql://app:s3cret@db",
		"app:s3cret@tcp(db:3306)/", "mysql://app:s3cret@db/shop?parseTime=maybe",
		"postgres://app:s3cret@db:notaport/shop",
	} {
		_, err := Parse(in)
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("%q: %v, want *Error", in, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: error shows the password: %v", in, err)
		}
	}
}

func TestRedactNative(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"app:s3cret@tcp(db:3306)/shop", "app:s3(c)@ret@tcp(db)/shop?password=s3cret", "mysql://app:s3cret@tcp(db)/x"} {
		if got := Redact(in); strings.Contains(got, "s3cret") || strings.Contains(got, "ret@") && strings.Contains(in, "s3(c)@ret") {
			t.Errorf("Redact(%q) = %q", in, got)
		}
	}
}
