package sqlrun

import (
	"errors"
	"fmt"
	"strings"
)

// errNotSent marks an error of the client that refused a statement before
// executing any of it.
var errNotSent = errors.New("sqllock: refused by the client before the statement was sent, so not applied")

// notSentByDatabaseSQL reports the refusals of database/sql, which checks
// and converts a statement's arguments before it calls the driver: nothing
// reaches the server. (Its "sql: expected %d destination arguments in
// Scan" comes after the statement ran, and is not one of them.)
func notSentByDatabaseSQL(msg string) bool {
	return strings.Contains(msg, "sql: converting argument ") || // convert.go: driverArgsConnLocked
		strings.Contains(msg, "sql: expected ") && strings.Contains(msg, " arguments, got ")
}

// NotSent reports whether err is the refusal, by database/sql or by the
// driver, of a statement before any of it was executed: an argument that
// could not be converted or encoded (a number out of the range of its
// parameter's type, a value of a type the driver has no encoding for), a
// statement with too many parameters or too large a packet. The driver's
// own messages are given by the dialect: drivers have no typed error for
// these. Such an error is no more ambiguous than a server's refusal: the
// statement was not applied, and the dialect must not report it as
// dialect.ErrOutcomeUnknown. A prepared statement may have been sent
// before its execution was refused; it changes nothing.
func NotSent(err error, driverMessages ...string) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errNotSent) {
		return true
	}
	msg := err.Error()
	if notSentByDatabaseSQL(msg) {
		return true
	}
	for _, m := range driverMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// MarkNotSent returns err, which NotSent recognised, saying that the
// statement was not sent.
func MarkNotSent(err error) error {
	if errors.Is(err, errNotSent) {
		return err
	}
	return fmt.Errorf("%w: %w", errNotSent, err)
}
