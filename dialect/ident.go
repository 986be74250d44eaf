package dialect

import "fmt"

// MaxIdentifierLen is the longest schema or database name accepted, the
// smaller of PostgreSQL's (63) and MySQL's (64) limits.
const MaxIdentifierLen = 63

// ValidateIdentifier reports whether s is a plain SQL identifier: ASCII
// letters, digits and underscores, not starting with a digit, 1 to
// MaxIdentifierLen bytes. Such a name needs no escaping inside quotes and
// means the same thing on every supported server, so dialects accept only
// these and quote them anyway.
func ValidateIdentifier(s string) error {
	if len(s) == 0 || len(s) > MaxIdentifierLen {
		return fmt.Errorf("%w: %q: length must be 1 to %d bytes", ErrInvalidIdentifier, s, MaxIdentifierLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%w: %q: only letters, digits and '_' are allowed, not starting with a digit", ErrInvalidIdentifier, s)
		}
	}
	return nil
}
