package chaos

import (
	"strings"
	"testing"
)

// upgradeable is an acquisition of an upgradeable read of name by w,
// granted token.
func (h *hist) upgradeable(w, name string, token int64) {
	h.read(w, name, token)
	h.es[len(h.es)-2].Upgradeable = true
	h.es[len(h.es)-1].Upgradeable = true
}

// downgrade and upgrade are a successful change of sides of w's
// acquisition (name, token).
func (h *hist) downgrade(w, name string, token int64) {
	h.add(w, DowngradeInvoke, name, token, 0)
	h.add(w, DowngradeOK, name, token, 0)
}

func (h *hist) upgrade(w, name string, token int64) {
	h.add(w, UpgradeInvoke, name, token, 0)
	h.add(w, UpgradeOK, name, token, 0)
}

// write is a committed guarded write of value by w with token.
func (h *hist) write(w, name string, token, value int64) {
	h.add(w, WriteInvoke, name, token, 0)
	h.add(w, WriteOK, name, token, value)
}

func TestCheckRWSidesCorrectHistory(t *testing.T) {
	t.Parallel()
	var h hist
	// A writer writes, downgrades, and readers come in beside it; one is
	// granted while the downgrade is under way.
	h.grant("w", "x", 1)
	h.trust("w", "x", 1)
	h.write("w", "x", 1, 1)
	h.add("w", DowngradeInvoke, "x", 1, 0)
	h.read("r1", "x", 2)
	h.add("w", DowngradeOK, "x", 1, 0)
	h.read("r2", "x", 3)
	h.trust("w", "x", 1)
	h.trust("r1", "x", 2)
	h.trust("r2", "x", 3)
	h.release("w", "x", 1)
	h.release("r1", "x", 2)
	// An upgradeable read beside a reader, granted after it; the reader
	// leaves, the upgradeable read upgrades (its token below the reader's)
	// and writes, then downgrades and a reader comes in.
	h.upgradeable("u", "x", 4)
	h.read("r3", "x", 5)
	h.trust("u", "x", 4)
	h.trust("r2", "x", 3)
	h.trust("r3", "x", 5)
	h.release("r2", "x", 3)
	h.release("r3", "x", 5)
	h.upgrade("u", "x", 4)
	h.trust("u", "x", 4)
	h.write("u", "x", 4, 2)
	h.downgrade("u", "x", 4)
	h.read("r1", "x", 6)
	h.trust("u", "x", 4)
	h.trust("r1", "x", 6)
	h.release("u", "x", 4)
	h.release("r1", "x", 6)
	// A failed upgrade (it may have happened) and a writer after it.
	h.upgradeable("u", "x", 7)
	h.add("u", UpgradeInvoke, "x", 7, 0)
	h.add("u", UpgradeFail, "x", 7, 0)
	h.release("u", "x", 7)
	h.turn("w", "x", 8, 3)
	wantKinds(t, CheckRWSides(h.es, Data{Counters: map[string]int64{"x": 3}, Writes: []Write{
		{Name: "x", Value: 1, Token: 1, Worker: "w"},
		{Name: "x", Value: 2, Token: 4, Worker: "u"},
		{Name: "x", Value: 3, Token: 8, Worker: "w"},
	}}))
}

func TestCheckRWSidesWriterBesideDowngraded(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "x", 1)
	h.downgrade("w1", "x", 1)
	h.grant("w2", "x", 2)
	h.trust("w1", "x", 1) // the downgraded reader still trusts after a writer came in
	wantKinds(t, CheckRWSides(h.es, Data{}), "double holder")
}

func TestCheckRWSidesDowngradeGap(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "x", 1)
	h.trust("w1", "x", 1)
	h.add("w1", DowngradeInvoke, "x", 1, 0)
	h.grant("w2", "x", 2) // between the write phase and the read phase
	h.add("w1", DowngradeOK, "x", 1, 0)
	h.trust("w1", "x", 1)
	vs := CheckRWSides(h.es, Data{})
	wantKinds(t, vs, "downgrade gap")
	for _, v := range vs {
		if v.Kind == "downgrade gap" && !strings.Contains(v.Msg, "writer→reader") {
			t.Errorf("the violation does not name the downgrade: %v", v)
		}
	}
}

func TestCheckRWSidesUpgradeBesideReader(t *testing.T) {
	t.Parallel()
	var h hist
	h.upgradeable("u", "x", 1)
	h.read("r", "x", 2)
	h.upgrade("u", "x", 1)
	h.trust("r", "x", 2) // the reader still trusts after the upgrade
	wantKinds(t, CheckRWSides(h.es, Data{}), "double holder")
}

func TestCheckRWSidesUpgradedBesideReaderAtOnce(t *testing.T) {
	t.Parallel()
	var h hist
	// The reader's grant and the upgrade overlap in time, so neither
	// certainly came first; both are trusted once both had returned.
	h.upgradeable("u", "x", 1)
	h.add("u", UpgradeInvoke, "x", 1, 0)
	h.read("r", "x", 2)
	h.add("u", UpgradeOK, "x", 1, 0)
	h.trust("u", "x", 1)
	h.trust("r", "x", 2)
	wantKinds(t, CheckRWSides(h.es, Data{}), "double holder")
}

func TestCheckRWSidesTwoUpgradeable(t *testing.T) {
	t.Parallel()
	var h hist
	h.upgradeable("u1", "x", 1)
	h.read("r", "x", 2)
	h.upgradeable("u2", "x", 3)
	h.trust("u1", "x", 1) // the first still trusts after the second came in
	vs := CheckRWSides(h.es, Data{})
	wantKinds(t, vs, "double holder")
	if len(vs) != 1 {
		t.Errorf("%d violations, want 1 (the reader beside them is fine)", len(vs))
	}
}

func TestCheckRWSidesUpgradeableBesideWriter(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w", "x", 1)
	h.upgradeable("u", "x", 2)
	h.trust("w", "x", 1)
	wantKinds(t, CheckRWSides(h.es, Data{}), "double holder")
}

func TestCheckRWSidesWriterBesideUpgradeable(t *testing.T) {
	t.Parallel()
	var h hist
	h.upgradeable("u", "x", 1)
	h.grant("w", "x", 2)
	h.trust("u", "x", 1)
	wantKinds(t, CheckRWSides(h.es, Data{}), "double holder")
}

func TestCheckRWSidesTokenChanged(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w", "x", 1)
	h.add("w", DowngradeInvoke, "x", 1, 0)
	h.add("w", DowngradeOK, "x", 2, 0) // a change of sides keeps the token
	wantKinds(t, CheckRWSides(h.es, Data{}), "token order")
}

func TestCheckRWSidesUpgradeTokenBelowWriter(t *testing.T) {
	t.Parallel()
	var h hist
	h.upgradeable("u", "x", 1)
	h.grant("w", "x", 2) // a writer beside the upgradeable read, not trusted
	h.upgrade("u", "x", 1)
	wantKinds(t, CheckRWSides(h.es, Data{}), "token order")
}

func TestCheckRWSidesStaleUpgradedWrite(t *testing.T) {
	t.Parallel()
	var h hist
	h.upgradeable("u", "x", 1)
	h.upgrade("u", "x", 1)
	h.read("r", "x", 2) // a reader beside the writer: the upgraded lease had ended
	h.write("u", "x", 1, 1)
	wantKinds(t, CheckRWSides(h.es, Data{Counters: map[string]int64{"x": 1},
		Writes: []Write{{Name: "x", Value: 1, Token: 1, Worker: "u"}}}), "stale write")
}

func TestCheckRWSidesMalformedChange(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w", "x", 1)
	h.add("v", UpgradeInvoke, "x", 1, 0) // of another worker's acquisition
	wantKinds(t, CheckRWSides(h.es, Data{}), "malformed")
}
