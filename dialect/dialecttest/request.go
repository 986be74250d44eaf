package dialecttest

import (
	"strings"
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// requestChecks are the checks of a sqlrun.ReleaseRequests: a request
// reaches a held lease only, is read back by that lease's renewals alone,
// and never by a later lease's.
var requestChecks = []struct {
	name  string
	check func(t *testing.T, e *env, rq sqlrun.ReleaseRequests)
}{
	{"AskAndRenew", checkRequestAskAndRenew},
	{"NotInherited", checkRequestNotInherited},
}

// request asks for name's release and checks the reply.
func (e *env) request(rq sqlrun.ReleaseRequests, name, reason string, want bool) {
	e.t.Helper()
	asked, err := rq.RequestRelease(e.ctx, name, reason)
	e.must(err, "RequestRelease "+name)
	if asked != want {
		e.t.Fatalf("RequestRelease(%q, %q) = %v, want %v", name, reason, asked, want)
	}
}

// renewal renews l and returns what the renewal told.
func (e *env) renewal(tb *table, l dialect.Lease) sqlrun.Renewal {
	e.t.Helper()
	rs, err := tb.stmts.RenewMany(e.ctx, []dialect.Lease{l}, long)
	e.must(err, "RenewMany")
	if len(rs) != 1 {
		e.t.Fatalf("RenewMany of one lease: %d outcomes", len(rs))
	}
	return rs[0]
}

// A renewal tells nothing before a request; a request of a held lease
// reaches it, with its reason byte for byte, and asking again (the same
// reason too) replaces the reason. A name nobody holds, or a lease
// released, cannot be asked. Renewals of other leases of the batch are
// not told.
func checkRequestAskAndRenew(t *testing.T, e *env, rq sqlrun.ReleaseRequests) {
	tb := e.table(Locks)
	e.request(rq, "job", "nobody", false)
	l := e.grant(tb, "job", "a")
	other := e.grant(tb, "other", "a")
	if r := e.renewal(tb, l); !r.OK || r.Asked {
		t.Fatalf("renewal before a request: %+v, want renewed and not asked", r)
	}
	reason := "deploy of v1.3 — ünïcode " + strings.Repeat("x", 1000)
	e.request(rq, "job", reason, true)
	rs, err := tb.stmts.RenewMany(e.ctx, []dialect.Lease{other, l}, long)
	e.must(err, "RenewMany")
	if !rs[0].OK || rs[0].Asked || !rs[1].OK || !rs[1].Asked || rs[1].Reason != reason {
		t.Fatalf("renewal of (other, asked) = %+v, want both renewed, the second asked for %q", rs, reason)
	}
	e.request(rq, "job", "again", true)
	e.request(rq, "job", "again", true) // the same reason: matched, whatever the driver counts
	if r := e.renewal(tb, l); !r.OK || !r.Asked || r.Reason != "again" {
		t.Fatalf("renewal after a second request: %+v, want asked for %q", r, "again")
	}
	e.request(rq, "job", "", true)
	if r := e.renewal(tb, l); !r.Asked || r.Reason != "" {
		t.Fatalf("renewal after a request without a reason: %+v, want asked for no reason", r)
	}
	e.release(tb, l, true)
	e.request(rq, "job", "too late", false)
}

// A request is kept for the lease asked: a takeover (a new token) is not
// asked by it, and an expired lease cannot be asked.
func checkRequestNotInherited(t *testing.T, e *env, rq sqlrun.ReleaseRequests) {
	tb := e.table(Locks)
	l := e.grant(tb, "job", "a")
	e.request(rq, "job", "move", true)
	e.expire(tb, "job")
	e.request(rq, "job", "expired", false)
	m := e.grant(tb, "job", "b")
	if r := e.renewal(tb, m); !r.OK || r.Asked {
		t.Fatalf("renewal of the new holder: %+v, want renewed and not asked", r)
	}
	if r := e.renewal(tb, l); r.OK || r.Asked {
		t.Fatalf("renewal of the expired lease: %+v, want refused", r)
	}
}
