#!/usr/bin/env bash
# The replicated test bed (make test-ha): starts, for each scenario, a
# PostgreSQL primary and a streaming standby from the system's server
# binaries on free loopback ports, in a temporary directory of their own
# (removed afterwards), runs the history-checked chaos workload across a
# forced failover (asynchronous and synchronous replication, the
# replication link frozen by the chaos proxy so that the standby lags), and
# checks it (internal/failover).
#
# PostgreSQL does not run as root: when run as root, the servers run as the
# system user $SQLLOCK_HA_USER (default sqllockha), created if missing.
# SQLLOCK_HA_PGBIN selects the binaries (default: the newest
# /usr/lib/postgresql/*/bin). Extra arguments go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${SQLLOCK_HA_PGBIN:-}" ]]; then
	SQLLOCK_HA_PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
fi
if [[ ! -x "${SQLLOCK_HA_PGBIN}/initdb" ]]; then
	echo "test-ha: no PostgreSQL server binaries (apt-get install postgresql, or set SQLLOCK_HA_PGBIN)" >&2
	exit 1
fi
export SQLLOCK_HA_PGBIN

if [[ "$(id -u)" == 0 ]]; then
	SQLLOCK_HA_USER="${SQLLOCK_HA_USER:-sqllockha}"
	if ! id "$SQLLOCK_HA_USER" >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin "$SQLLOCK_HA_USER"
	fi
	export SQLLOCK_HA_USER
fi

export SQLLOCK_TEST_HA=1
exec go test -race -count=1 -timeout 20m -v -run '^TestFailover$' "$@" ./internal/failover/
