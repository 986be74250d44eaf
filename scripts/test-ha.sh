#!/usr/bin/env bash
# The replicated test bed (make test-ha), every server on free loopback
# ports in a temporary directory of its own (removed afterwards):
#  - tests/failover: for each scenario, a PostgreSQL primary and a
#    streaming standby from the system's server binaries; the
#    history-checked chaos workload across a forced failover (asynchronous
#    and synchronous replication, the replication link frozen by the fault
#    proxy, internal/faultproxy, so that the standby lags), checked by the
#    chaos suite's checker;
#  - dialect/mysql TestGalera: a 3-node MariaDB Galera cluster (mariadbd,
#    galera-4); the conformance suite, exclusion across nodes, the
#    pessimistic strategy refused, and the write stall when a node dies.
#    Skipped with SQLLOCK_HA_GALERA=0. As root on Debian, galera-4 is
#    installed when missing.
#
# The servers do not run as root: when run as root, they run as the
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
go test -race -count=1 -timeout 20m -v -run '^TestFailover$' "$@" ./tests/failover/
if [[ "${SQLLOCK_HA_GALERA:-1}" != 0 ]]; then
	if [[ ! -e /usr/lib/galera/libgalera_smm.so && "$(id -u)" == 0 && -f /etc/debian_version ]] && command -v apt-get >/dev/null; then
		echo "test-ha: installing galera-4 (the Galera provider)" >&2
		DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends galera-4 >/tmp/sqllock-test-ha-apt.log 2>&1 ||
			{ apt-get -q update >>/tmp/sqllock-test-ha-apt.log 2>&1 &&
				DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends galera-4 >>/tmp/sqllock-test-ha-apt.log 2>&1; } ||
			{ tail -25 /tmp/sqllock-test-ha-apt.log >&2; echo "test-ha: apt-get install galera-4 failed" >&2; exit 1; }
	fi
	if [[ ! -e /usr/lib/galera/libgalera_smm.so ]]; then
		echo "test-ha: no Galera provider (apt-get install galera-4 mariadb-server, or SQLLOCK_HA_GALERA=0)" >&2
		exit 1
	fi
	SQLLOCK_TEST_GALERA=1 go test -race -count=1 -timeout 20m -v -run '^TestGalera$' "$@" ./dialect/mysql/
fi
