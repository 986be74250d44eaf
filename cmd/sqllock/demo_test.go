package main

import (
	"strings"
	"testing"

	"github.com/sqllock/sqllock/sqllocktest/shop"
)

// The line under the demo's table explains the no-lock row: the stock left
// after overselling is the last write, not the stock minus the sales.
func TestOversoldNote(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    shop.Result
		want string
	}{
		{shop.Result{Initial: 2, Sold: 5, Left: 1}, "STOCK LEFT (1) is the last write, not 2 - 5, and 3 were sold that did not exist."},
		{shop.Result{Initial: 2, Sold: 2, Left: 0}, "happened not to oversell (2 sold of 2)"},
	} {
		if got := oversoldNote(c.r); !strings.Contains(got, c.want) || strings.Contains(got, "\n") {
			t.Errorf("oversoldNote(%+v) = %q, want one line with %q", c.r, got, c.want)
		}
	}
}
