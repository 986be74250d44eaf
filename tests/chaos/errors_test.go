package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// errHistogram counts the failed acquisitions, writes and releases of a
// history by error message, most frequent first: with SQLLOCK_CHAOS_ERRORS
// set, each scenario logs it, to see what its faults did.
func errHistogram(events []Event) string {
	m := map[string]int{}
	for _, e := range events {
		if e.Kind == AcquireFail || e.Kind == WriteFail || e.Kind == ReleaseFail || e.Kind == DowngradeFail || e.Kind == UpgradeFail {
			msg := e.Err
			if i := strings.Index(msg, "(SQLSTATE"); i > 0 {
				msg = msg[:i]
			}
			if len(msg) > 110 {
				msg = msg[:110]
			}
			m[string(e.Kind)+": "+msg]++
		}
	}
	var ks []string
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%5d %s", n, k))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ks)))
	return strings.Join(ks, "\n")
}
