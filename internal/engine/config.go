package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// Config is what the engine needs of a constructor's options: the root
// package's LeaseOptions, which document the fields, with MinHold and
// Fair where the primitive has them (TableOptions, OptimisticOptions,
// SemaphoreOptions), and the errors the engine reports with.
type Config struct {
	TTL           time.Duration
	RenewInterval time.Duration
	MaxBackoff    time.Duration
	MinHold       time.Duration
	Fair          bool
	Logger        *slog.Logger
	Observer      observe.Observer

	// Lost and NotHeld are the causes a lease's context is cancelled
	// with, and the errors of a release or guard that finds the lease
	// lost or ended: the root package's ErrLockLost and ErrNotHeld, which
	// it declares (and this package cannot import).
	Lost, NotHeld error
}

const (
	defaultTTL        = 30 * time.Second
	minTTL            = 10 * time.Millisecond
	defaultMaxBackoff = 500 * time.Millisecond
	minBackoff        = 5 * time.Millisecond
)

// WithDefaults returns c with its zero durations and logger defaulted,
// or an error wrapping dialect.ErrInvalidOptions (and
// observe.ErrNoInterface for an observer that would hear nothing). Lost and NotHeld must be
// set.
func (c Config) WithDefaults() (Config, error) {
	if c.Lost == nil || c.NotHeld == nil {
		return c, errors.New("engine: Config.Lost and Config.NotHeld must be set")
	}
	if c.TTL < 0 || c.RenewInterval < 0 || c.MaxBackoff < 0 || c.MinHold < 0 {
		return c, fmt.Errorf("%w: durations must not be negative", dialect.ErrInvalidOptions)
	}
	if c.TTL == 0 {
		c.TTL = defaultTTL
	}
	if c.TTL < minTTL {
		return c, fmt.Errorf("%w: TTL %v is shorter than %v", dialect.ErrInvalidOptions, c.TTL, minTTL)
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.RenewInterval > c.TTL/3 { // not TTL < 3*RenewInterval, which overflows
		return c, fmt.Errorf("%w: TTL %v must be at least 3 x RenewInterval %v", dialect.ErrInvalidOptions, c.TTL, c.RenewInterval)
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = defaultMaxBackoff
	}
	if c.MaxBackoff < minBackoff {
		c.MaxBackoff = minBackoff
	}
	if err := observe.Check(c.Observer); err != nil {
		return c, fmt.Errorf("%w: Observer: %w", dialect.ErrInvalidOptions, err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
