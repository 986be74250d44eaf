package dialecttest

import (
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// rwUpgradeable makes one attempt at an upgradeable read of name.
func rwUpgradeable(e *env, rw sqlrun.RWLockTable, name, owner string, wait bool) dialect.RWGrant {
	e.t.Helper()
	g, err := rw.Acquire(e.ctx, dialect.RWAcquireParams{Name: name, Owner: owner, TTL: long, Shared: true, Upgradeable: true, Wait: wait})
	e.must(err, "Acquire upgradeable "+name+" by "+owner)
	return g
}

// rwUpgrade makes one attempt at upgrading owner's upgradeable lease g.
func rwUpgrade(e *env, rw sqlrun.RWLockTable, name, owner string, g dialect.RWGrant, wait bool) dialect.RWGrant {
	e.t.Helper()
	u, err := rw.Upgrade(e.ctx, dialect.RWUpgradeParams{Name: name, Owner: owner, Token: g.Token, TTL: long, Wait: wait})
	e.must(err, "Upgrade "+name+" by "+owner)
	return u
}

// rwDowngrade downgrades owner's lease g, reporting whether it did.
func rwDowngrade(e *env, rw sqlrun.RWLockTable, name, owner string, g dialect.RWGrant) bool {
	e.t.Helper()
	ok, err := rw.Downgrade(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: g.Token})
	e.must(err, "Downgrade "+name+" by "+owner)
	return ok
}

// A downgraded writer is a reader at once, with its token and a lease
// still renewed: a reader waiting gets in, a writer waiting does not (its
// intent keeps new readers out, as beside any reader), and it is granted
// once the downgraded reader leaves. Only a live write lease downgrades.
func checkRWDowngrade(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const name = "downgrade"
	w := rwGrant(e, rw, name, "w", false, false)
	if g := rwGrant(e, rw, name, "r", true, true); g.Token != 0 {
		t.Fatalf("reader beside a writer: %+v, want refused", g)
	}
	if !rwDowngrade(e, rw, name, "w", w) {
		t.Fatal("Downgrade of the writer: false, want true")
	}
	if rwDowngrade(e, rw, name, "w", w) {
		t.Fatal("second Downgrade: true, want false (a read lease)")
	}
	ok, err := testutil.Renewed(rw.RenewMany(e.ctx, []dialect.Lease{{Name: name, Owner: "w", Token: w.Token}}, long))
	e.must(err, "RenewMany")
	if !ok[0] {
		t.Fatal("the downgraded lease was not renewed under its token")
	}
	r := rwGrant(e, rw, name, "r", true, true)
	if r.Token <= w.Token || !r.Shared {
		t.Fatalf("reader after the downgrade: %+v, want a read above %d", r, w.Token)
	}
	if g := rwGrant(e, rw, name, "w", true, false); g.Token != w.Token || !g.Shared {
		t.Fatalf("read by the downgraded owner: %+v, want its read lease %d", g, w.Token)
	}
	rwRelease(e, rw, name, "w", w)
	if g := rwGrant(e, rw, name, "w2", false, true); g.Token != 0 {
		t.Fatalf("writer beside the downgraded reader: %+v, want refused", g)
	}
	if g := rwGrant(e, rw, name, "r2", true, false); g.Token != 0 {
		t.Fatalf("new reader behind the writer's intent: %+v, want refused", g)
	}
	rwRelease(e, rw, name, "w", w)
	rwRelease(e, rw, name, "r", r)
	w2 := rwGrant(e, rw, name, "w2", false, true)
	if w2.Token <= r.Token {
		t.Fatalf("writer after the readers left: %+v, want a token above %d", w2, r.Token)
	}
	// A writer waiting when the writer downgrades stays out.
	if g := rwGrant(e, rw, name, "w3", false, true); g.Token != 0 {
		t.Fatalf("second writer: %+v, want refused", g)
	}
	if !rwDowngrade(e, rw, name, "w2", w2) {
		t.Fatal("Downgrade beside a waiting writer: false, want true")
	}
	if g := rwGrant(e, rw, name, "w3", false, true); g.Token != 0 {
		t.Fatalf("waiting writer after the downgrade: %+v, want refused", g)
	}
	rwRelease(e, rw, name, "w2", w2)
	if rwDowngrade(e, rw, name, "w2", w2) {
		t.Fatal("Downgrade of a released lease: true, want false")
	}
	w3 := rwGrant(e, rw, name, "w3", false, true)
	if w3.Token == 0 {
		t.Fatal("waiting writer after the downgraded reader left: refused")
	}
	if rwDowngrade(e, rw, name, "w3", dialect.RWGrant{Token: w3.Token + 1}) {
		t.Fatal("Downgrade under another token: true, want false")
	}
	e.must(e.Expire(e.ctx, RWHolders, name), "Expire")
	if rwDowngrade(e, rw, name, "w3", w3) {
		t.Fatal("Downgrade of an expired lease: true, want false")
	}
}

// An upgradeable read shares the name with plain readers, and keeps
// writers and other upgradeable readers out; its upgrade waits for the
// other readers, keeping new ones out meanwhile (its intent), and keeps
// the token; only the upgradeable lease upgrades.
func checkRWUpgradeable(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const name = "upgradeable"
	r := rwGrant(e, rw, name, "r", true, false)
	u := rwUpgradeable(e, rw, name, "u", false)
	if u.Token <= r.Token || !u.Shared {
		t.Fatalf("upgradeable beside a reader: %+v, want a read above %d", u, r.Token)
	}
	r2 := rwGrant(e, rw, name, "r2", true, false)
	if r2.Token <= u.Token {
		t.Fatalf("reader beside the upgradeable: %+v, want a read above %d", r2, u.Token)
	}
	if g := rwUpgradeable(e, rw, name, "u2", false); g.Token != 0 || g.Left <= 0 {
		t.Fatalf("second upgradeable: %+v, want refused with time left", g)
	}
	if g := rwGrant(e, rw, name, "w", false, false); g.Token != 0 {
		t.Fatalf("writer beside the upgradeable: %+v, want refused", g)
	}
	if g := rwUpgradeable(e, rw, name, "u", false); g.Token != u.Token {
		t.Fatalf("re-entered upgradeable: %+v, want token %d", g, u.Token)
	}
	if g := rwGrant(e, rw, name, "u", true, false); g.Token != u.Token {
		t.Fatalf("read by the upgradeable's owner: %+v, want token %d", g, u.Token)
	}
	rwRelease(e, rw, name, "u", u)
	rwRelease(e, rw, name, "u", u)
	if g := rwUpgradeable(e, rw, name, "r", false); !g.Upgrade || g.Token != 0 {
		t.Fatalf("upgradeable by a plain reader: %+v, want refused as an upgrade", g)
	}
	if g := rwGrant(e, rw, name, "u", false, false); !g.Upgrade || g.Token != 0 {
		t.Fatalf("write by the upgradeable's owner: %+v, want refused as an upgrade", g)
	}
	if g := rwUpgrade(e, rw, name, "r", r, false); !g.Upgrade || g.Token != 0 {
		t.Fatalf("Upgrade of a plain read: %+v, want refused as an upgrade", g)
	}
	if g := rwUpgrade(e, rw, name, "u", u, true); g.Token != 0 || g.Left <= 0 {
		t.Fatalf("Upgrade beside readers: %+v, want refused with time left", g)
	}
	if g := rwGrant(e, rw, name, "r3", true, false); g.Token != 0 {
		t.Fatalf("new reader behind the upgrade: %+v, want refused", g)
	}
	if g := rwGrant(e, rw, name, "r", true, false); g.Token != r.Token {
		t.Fatalf("the reader in, re-entering behind the upgrade: %+v, want token %d", g, r.Token)
	}
	rwRelease(e, rw, name, "r", r)
	rwRelease(e, rw, name, "r", r)
	if g := rwUpgrade(e, rw, name, "u", u, true); g.Token != 0 {
		t.Fatalf("Upgrade beside a reader: %+v, want refused", g)
	}
	rwRelease(e, rw, name, "r2", r2)
	if g := rwUpgrade(e, rw, name, "u", u, true); g.Token != u.Token {
		t.Fatalf("Upgrade with the readers gone: %+v, want token %d", g, u.Token)
	}
	if g := rwUpgrade(e, rw, name, "u", u, true); g.Token != u.Token {
		t.Fatalf("Upgrade of the upgraded lease: %+v, want token %d", g, u.Token)
	}
	if g := rwGrant(e, rw, name, "r3", true, false); g.Token != 0 {
		t.Fatalf("reader beside the upgraded writer: %+v, want refused", g)
	}
	if g := rwUpgradeable(e, rw, name, "u2", false); g.Token != 0 {
		t.Fatalf("upgradeable beside the upgraded writer: %+v, want refused", g)
	}
	ok, err := testutil.Renewed(rw.RenewMany(e.ctx, []dialect.Lease{{Name: name, Owner: "u", Token: u.Token}}, long))
	e.must(err, "RenewMany")
	if !ok[0] {
		t.Fatal("the upgraded lease was not renewed under its token")
	}
	if !rwDowngrade(e, rw, name, "u", u) {
		t.Fatal("Downgrade of the upgraded lease: false, want true")
	}
	r3 := rwGrant(e, rw, name, "r3", true, false)
	if r3.Token <= u.Token {
		t.Fatal("reader after the downgrade: refused (intent left behind?)")
	}
	u2 := rwUpgradeable(e, rw, name, "u2", false)
	if u2.Token == 0 {
		t.Fatal("upgradeable beside plain readers after the downgrade: refused")
	}
	rwRelease(e, rw, name, "u", u)
	rwRelease(e, rw, name, "r3", r3)
	// A waiting writer's intent keeps new upgradeable readers out, and
	// gives way to the upgrade of the one in.
	if g := rwGrant(e, rw, name, "w", false, true); g.Token != 0 {
		t.Fatalf("writer beside the upgradeable: %+v, want refused", g)
	}
	if g := rwUpgradeable(e, rw, name, "u3", false); g.Token != 0 {
		t.Fatalf("upgradeable behind a writer's intent: %+v, want refused", g)
	}
	if g := rwUpgrade(e, rw, name, "u2", u2, true); g.Token != u2.Token {
		t.Fatalf("Upgrade beside a waiting writer: %+v, want token %d", g, u2.Token)
	}
	if g := rwGrant(e, rw, name, "w", false, true); g.Token != 0 {
		t.Fatalf("writer beside the upgraded writer: %+v, want refused", g)
	}
	rwRelease(e, rw, name, "u2", u2)
	if g := rwUpgrade(e, rw, name, "u2", u2, true); !g.Lost {
		t.Fatalf("Upgrade of a released lease: %+v, want lost", g)
	}
	w := rwGrant(e, rw, name, "w", false, true)
	if w.Token <= u2.Token {
		t.Fatalf("writer after the upgraded one left: %+v, want a token above %d", w, u2.Token)
	}
}
