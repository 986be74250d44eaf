package chaos

import (
	"strings"
	"testing"
	"time"
)

// CheckRevoke accepts a request told to the lease it asked, and reports a
// request inherited by a later lease, one told before it was made, a
// holder never told, and an ask that reached nobody yet said it did.
func TestCheckRevoke(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	const ttl = 3 * time.Second
	first := RevokeHold{Token: 1, GrantStart: at(0), GrantEnd: at(10), Told: at(1500), Reason: "a", ReleaseStart: at(1600)}
	second := RevokeHold{Token: 2, GrantStart: at(1700), GrantEnd: at(1710), ReleaseStart: at(9000)}
	ask := RevokeAsk{Reason: "a", Start: at(500), End: at(520), Asked: true}
	if v := CheckRevoke(ttl, []RevokeHold{first, second}, []RevokeAsk{ask}); len(v) != 0 {
		t.Fatalf("a good history: %v", v)
	}
	for _, c := range []struct {
		name  string
		holds []RevokeHold
		asks  []RevokeAsk
		want  string
	}{
		{"inherited", []RevokeHold{first, {Token: 2, GrantStart: at(1700), GrantEnd: at(1710), Told: at(2000), Reason: "a", ReleaseStart: at(2100)}},
			[]RevokeAsk{ask}, "asked of an earlier lease"},
		{"told early", []RevokeHold{{Token: 1, GrantStart: at(0), GrantEnd: at(10), Told: at(400), Reason: "a", ReleaseStart: at(1600)}},
			[]RevokeAsk{ask}, "before its ask started"},
		{"never told", []RevokeHold{{Token: 1, GrantStart: at(0), GrantEnd: at(10), ReleaseStart: at(5000)}},
			[]RevokeAsk{ask}, "never told"},
		{"nobody", []RevokeHold{second}, []RevokeAsk{ask}, "no hold overlaps it"},
		{"unknown reason", []RevokeHold{{Token: 1, GrantStart: at(0), GrantEnd: at(10), Told: at(600), Reason: "b", ReleaseStart: at(700)}},
			[]RevokeAsk{ask}, "which no ask gave"},
	} {
		v := CheckRevoke(ttl, c.holds, c.asks)
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.want) {
			t.Errorf("%s: violations %v, want one saying %q", c.name, v, c.want)
		}
	}
	// A lost hold need not be told; an ask with an error may have asked.
	lost := RevokeHold{Token: 1, GrantStart: at(0), GrantEnd: at(10), ReleaseStart: at(5000), Lost: true}
	if v := CheckRevoke(ttl, []RevokeHold{lost}, []RevokeAsk{ask}); len(v) != 0 {
		t.Errorf("a lost hold not told: %v", v)
	}
	failed := RevokeAsk{Reason: "a", Start: at(500), End: at(520), Err: "connection reset"}
	if v := CheckRevoke(ttl, []RevokeHold{first}, []RevokeAsk{failed}); len(v) != 0 {
		t.Errorf("a hold told by an ask that failed: %v", v)
	}
}
