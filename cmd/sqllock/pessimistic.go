package main

import (
	"fmt"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

func newPessimistic(d dialect.Dialect) (sqllock.Locker, error) {
	return nil, fmt.Errorf("%w: pessimistic strategy not yet available", sqllock.ErrUnsupported)
}
