package postgres

import "time"

// WithProbeEvery sets the period of the listening connection's probes, for
// tests that wait for a probe to fail.
func WithProbeEvery(every time.Duration) Option {
	return func(d *Dialect) error {
		d.probeEvery = every
		return nil
	}
}
