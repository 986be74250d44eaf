#!/usr/bin/env bash
# scripts/test-tidb.sh: the TiDB tests (`make test-tidb` runs it; opt-in,
# not part of `make test`).
#
# 1. Builds tidb-server once from the Go module proxy and caches the binary
#    in $SQLLOCK_TIDB_CACHE (default ~/.cache/sqllock/tidb)/<version>/.
#    The first build takes about 6 minutes on 2 idle cores (much longer on a
#    loaded machine: it runs at nice 19 with SQLLOCK_TIDB_BUILD_P, default 1,
#    parallel compiles) and about 4 GB of module and build cache.
# 2. Starts it as a single server with its embedded store (unistore, in
#    memory) on two free loopback ports, in a temporary directory.
# 3. Runs, with SQLLOCK_TEST_TIDB_DSN pointing at it, the TiDB dialect's
#    conformance suite, the MySQL dialect's refusal of TiDB, and the chaos
#    suite's TiDB scenarios (tests/chaos: every strategy under each
#    fault this TiDB build survives; see tidbSkip there).
# 4. Stops the server (by its PID) and removes the directory.
#
# SQLLOCK_TIDB_BUILD_ONLY=1 stops after step 1. Extra arguments go to both
# `go test` runs (say -v, or SQLLOCK_CHAOS_DURATION=10s in the environment
# for longer chaos scenarios).
set -euo pipefail

cd "$(dirname "$0")/.."

# The TiDB source: a commit of github.com/pingcap/tidb (v8.5 development)
# as the Go module proxy serves it. Its parser is a module of its own, which
# the main module's replace directive expects in pkg/parser.
readonly TIDB_MODULE=github.com/pingcap/tidb
readonly TIDB_VERSION=v1.1.0-beta.0.20241125141335-ec8b81b98edc
readonly PARSER_MODULE=github.com/pingcap/tidb/pkg/parser
readonly PARSER_VERSION=v0.0.0-20241125141335-ec8b81b98edc
readonly HOST=127.0.0.1
readonly WAIT_SECONDS=120 # bound on the wait for the server to start

cache="${SQLLOCK_TIDB_CACHE:-$HOME/.cache/sqllock/tidb}/$TIDB_VERSION"
bin="$cache/tidb-server"

log() { printf 'test-tidb.sh: %s\n' "$*" >&2; }
die() {
	printf 'test-tidb.sh: error: %s\n' "$*" >&2
	exit 1
}

# module_dir MODULE VERSION: downloads the module, prints its directory.
module_dir() {
	(cd "$cache" && go mod download -json "$1@$2") |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

build() {
	mkdir -p "$cache"
	local tidb parser src="$cache/src"
	tidb="$(module_dir "$TIDB_MODULE" "$TIDB_VERSION")"
	parser="$(module_dir "$PARSER_MODULE" "$PARSER_VERSION")"
	[ -n "$tidb" ] && [ -n "$parser" ] || die "could not download $TIDB_MODULE@$TIDB_VERSION and its parser"
	# The module cache is read-only; the build needs the parser in place.
	rm -rf "$src"
	cp -r "$tidb" "$src"
	chmod -R u+w "$src"
	rm -rf "$src/pkg/parser"
	cp -r "$parser" "$src/pkg/parser"
	chmod -R u+w "$src/pkg/parser"
	log "building tidb-server in $src (nice 19, -p ${SQLLOCK_TIDB_BUILD_P:-1}): minutes to tens of minutes"
	local start=$SECONDS
	(cd "$src" && GOTOOLCHAIN=local nice -n 19 go build -p "${SQLLOCK_TIDB_BUILD_P:-1}" -trimpath \
		-o "$bin.tmp" ./cmd/tidb-server)
	mv "$bin.tmp" "$bin"
	rm -rf "$src"
	log "built $bin in $((SECONDS - start)) s"
}

if [ -x "$bin" ]; then
	log "using the cached $bin"
else
	build
fi
[ "${SQLLOCK_TIDB_BUILD_ONLY:-}" = 1 ] && exit 0

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { timeout 3 bash -c ": </dev/tcp/$HOST/$1" 2>/dev/null; }

# free_port: a port nothing listens on (the server fails to start, and is
# started again on others, if one is taken meanwhile).
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		port_open "$p" || break
	done
	echo "$p"
}

dir="$(mktemp -d)"
pid=
stop() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap stop EXIT

started=
for attempt in 1 2 3; do
	port="$(free_port)"
	status="$(free_port)"
	[ "$port" != "$status" ] || continue
	"$bin" -store unistore -path "" -host "$HOST" -P "$port" -status-host "$HOST" -status "$status" \
		-temp-dir "$dir/tmp" -socket "" -L warn -log-file "$dir/tidb.log" >"$dir/stdout" 2>&1 &
	pid=$!
	for _ in $(seq "$WAIT_SECONDS"); do
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		if port_open "$port"; then
			started=1
			break
		fi
		sleep 1
	done
	[ -n "$started" ] && break
	log "tidb-server did not start (attempt $attempt):"
	tail -n 20 "$dir/stdout" "$dir/tidb.log" >&2 || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
done
[ -n "$started" ] || die "tidb-server did not start"
log "tidb-server (pid $pid) on $HOST:$port, status port $status"

export SQLLOCK_TEST_TIDB_DSN="root@tcp($HOST:$port)/test"
report="$dir/chaos-report"
code=0
go test -race -count=1 -timeout 20m \
	-run '^(TestTiDBConformance|TestMySQLDialectRefusesTiDB|TestMigrationLockNameLengthTiDB|TestTiDBExclusionBesideReaper|TestTiDBConcurrentMigrate|TestTiDBConcurrentMigrateAfterDown)$' "$@" ./dialect/mysql/ || code=1
SQLLOCK_CHAOS_REPORT="$report" go test -race -count=1 -timeout 30m \
	-run '^TestChaos$/^tidb$' "$@" ./tests/chaos/ || code=1
[ -f "$report" ] && cat "$report"
if ! kill -0 "$pid" 2>/dev/null; then
	log "tidb-server exited during the tests:"
	grep -m 1 -A 3 '^panic' "$dir/stdout" >&2 || true
	tail -n 40 "$dir/stdout" >&2 || true
	code=1
fi
exit "$code"
