package sqllock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock/dialect"
)

// Errors returned by lockers, locks and helpers. Test for them with errors.Is.
var (
	// ErrLocked means another owner holds the lock.
	ErrLocked = errors.New("sqllock: locked by another owner")
	// ErrLockLost means the lock is no longer held by this acquisition: its
	// lease expired, was taken over, or could not be renewed within its trust
	// window. It is the cause of a lost lock's context.
	ErrLockLost = errors.New("sqllock: lock lost")
	// ErrNotHeld means the lock handle was already released. It is the cause
	// of a released lock's context.
	ErrNotHeld = errors.New("sqllock: lock not held")
	// ErrInvalidName is returned for a lock name that is empty, longer than
	// MaxNameLen bytes, not valid UTF-8, or contains a NUL byte.
	ErrInvalidName = errors.New("sqllock: invalid lock name")
	// ErrInvalidOwner is returned for an owner identity (see WithOwner) that
	// breaks the same rules as a name.
	ErrInvalidOwner = errors.New("sqllock: invalid owner")
	// ErrInvalidOptions is returned by constructors for options that are
	// out of range or inconsistent.
	ErrInvalidOptions = errors.New("sqllock: invalid options")

	// ErrUnsupported means the dialect does not implement the requested
	// strategy. SQLite, for one, has no pessimistic strategy: it has no row
	// locks (a writing transaction locks the whole database, a reading one
	// nothing), so there is no SELECT ... FOR UPDATE to hold a lock with.
	ErrUnsupported = errors.New("sqllock: not supported by this dialect")
	// ErrConflict means a version-checked write matched no row: another
	// writer changed the row since it was read (or the row is gone). See
	// CheckUpdate and RetryOnConflict.
	ErrConflict = errors.New("sqllock: version conflict")
	// ErrRowNotFound means the row a version-checked write targets does not
	// exist. See ConflictOrMissing.
	ErrRowNotFound = errors.New("sqllock: row not found")
	// ErrSchemaMissing means the lock tables are missing or outdated: run
	// Migrate, or apply the files of the migrations package.
	ErrSchemaMissing = dialect.ErrSchemaMissing
	// ErrOutcomeUnknown means the connection failed after a statement was
	// sent, so it may or may not have been applied. See Lock.Release.
	ErrOutcomeUnknown = dialect.ErrOutcomeUnknown
	// ErrNilDB is returned for a nil database, pool or dialect.
	ErrNilDB = dialect.ErrNilDB
	// ErrInvalidIdentifier is returned by dialects for a schema or database
	// name that is not a plain SQL identifier.
	ErrInvalidIdentifier = dialect.ErrInvalidIdentifier
)

// MaxNameLen is the longest lock name or owner identity, in bytes.
const MaxNameLen = 255

// Locker acquires named locks. All strategies implement it.
//
// Acquire waits until the lock is acquired or ctx ends; the error then wraps
// ctx.Err(). TryAcquire returns ErrLocked at once when another owner holds
// the lock. Each call acquires on behalf of a fresh owner identity, so two
// goroutines (or two calls in one goroutine) exclude each other, unless ctx
// carries an owner set with WithOwner: acquiring again under the same owner
// re-enters the lock (see Lock).
type Locker interface {
	Acquire(ctx context.Context, name string) (*Lock, error)
	TryAcquire(ctx context.Context, name string) (*Lock, error)
}

// ValidateName reports whether name is usable as a lock name: 1 to
// MaxNameLen bytes of valid UTF-8 without NUL bytes. The error wraps
// ErrInvalidName.
func ValidateName(name string) error {
	if err := validateString(name); err != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, err)
	}
	return nil
}

func validateString(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("%d bytes, longer than %d", len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return "contains a NUL byte"
		}
	}
	return ""
}

type ownerKey struct{}

// WithOwner returns a context that makes lockers acquire on behalf of owner.
// Acquiring a name again under an owner that already holds it re-enters the
// lock: the hold count goes up, the fencing token stays, and the lock is freed
// when every hold has been released. Owners are compared across processes, so
// an owner must be unique to the logical holder (Lock.Owner of an earlier
// acquisition is a good choice). Invalid owners are reported by Acquire and
// TryAcquire with ErrInvalidOwner.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// ownerSource hands out owner identities unique to this process and call.
type ownerSource struct {
	prefix string
	n      atomic.Uint64
}

func newOwnerSource() *ownerSource {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &ownerSource{prefix: host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:]) + ":"}
}

// owner returns the owner carried by ctx, or a new unique one.
func (o *ownerSource) owner(ctx context.Context) (string, error) {
	if v, ok := ctx.Value(ownerKey{}).(string); ok {
		if err := validateString(v); err != "" {
			return "", fmt.Errorf("%w: %s", ErrInvalidOwner, err)
		}
		return v, nil
	}
	return o.prefix + strconv.FormatUint(o.n.Add(1), 36), nil
}

// Options configure lease-based lockers (NewTable, NewOptimistic). The zero value of each
// field selects its default.
type Options struct {
	// TTL is the lease length, counted on the database clock from each grant
	// or renewal. Default 30s; at least 10ms.
	TTL time.Duration
	// RenewInterval is how often a held lease is renewed. Default TTL/3; it
	// must satisfy TTL >= 3*RenewInterval.
	RenewInterval time.Duration
	// MaxBackoff caps the jittered wait between attempts of Acquire when the
	// holder's lease does not end sooner. Default 500ms.
	MaxBackoff time.Duration
	// Logger receives renewal warnings and lost-lock reports. Default: none.
	Logger *slog.Logger
}

const (
	defaultTTL        = 30 * time.Second
	minTTL            = 10 * time.Millisecond
	defaultMaxBackoff = 500 * time.Millisecond
	minBackoff        = 5 * time.Millisecond
)

func (o Options) withDefaults() (Options, error) {
	if o.TTL < 0 || o.RenewInterval < 0 || o.MaxBackoff < 0 {
		return o, fmt.Errorf("%w: durations must not be negative", ErrInvalidOptions)
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if o.TTL < minTTL {
		return o, fmt.Errorf("%w: TTL %v is shorter than %v", ErrInvalidOptions, o.TTL, minTTL)
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.TTL / 3
	}
	if o.TTL < 3*o.RenewInterval {
		return o, fmt.Errorf("%w: TTL %v must be at least 3 x RenewInterval %v", ErrInvalidOptions, o.TTL, o.RenewInterval)
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = defaultMaxBackoff
	}
	if o.MaxBackoff < minBackoff {
		o.MaxBackoff = minBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Do acquires name with l (waiting as Acquire does), runs fn with the lock's
// context, and releases the lock even if ctx has ended. The lock's context is
// cancelled with cause ErrLockLost if the lock is lost while fn runs. Do
// returns fn's error joined with the release error, if any.
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context) error) error {
	lock, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	ferr := fn(lock.Context())
	return errors.Join(ferr, lock.Release(context.WithoutCancel(ctx)))
}
