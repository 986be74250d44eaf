#!/usr/bin/env bash
# scripts/test.sh: the project's one test command (`make test` runs it).
#
# Finds a PostgreSQL and a MariaDB/MySQL server for the integration tests,
# exports SQLLOCK_TEST_POSTGRES_URL and SQLLOCK_TEST_MYSQL_DSN, then runs
# `go vet` and `go test -race -shuffle=on`. For each server, in order:
#
#   1. the environment variable, if set, is used as is;
#   2. else a server already listening on 127.0.0.1 at the default port is used
#      (PostgreSQL: user postgres, then root, no password; MariaDB/MySQL:
#      user root, empty password), creating database `test` if missing;
#   3. else the local server is started (PostgreSQL with pg_ctlcluster,
#      MariaDB with start-stop-daemon), after installing it with apt-get when
#      it is missing and we run as root on Debian.
#
# Before any long step it checks the other prerequisites: a C compiler (the
# race detector needs cgo), CA certificates (the go command downloads the
# module's dependencies over HTTPS), and the dependencies themselves. As
# root on Debian it installs what is missing (apt-get, without recommended
# packages, output kept in a log unless it fails). At the end it says which
# servers it started and how to stop them.
#
# SQLLOCK_TEST_PG_PORT and SQLLOCK_TEST_MY_PORT (default 5432 and 3306) are
# the ports to look for the servers on, and to start them on: for a machine
# (or a chroot sharing its network) whose default ports serve something else.
#
# With SQLLOCK_SETUP_ONLY=1 (as scripts/bench.sh sources it) it stops after
# finding the servers and exporting their addresses.
#
# Extra arguments go to `go test`; package arguments (./..., ./internal/x,
# github.com/...) restrict both vet and test to those packages:
#
#   scripts/test.sh -run TestX -v
#   scripts/test.sh ./internal/dbtest/
#
# The default, and ./... given as an argument, is every package of every
# module of the workspace (go.work: the core, sqllockotel, cmd, examples;
# scripts/modules.sh), and then it also checks that every module's go.mod
# and go.sum are tidy (scripts/tidy.sh -diff).
set -euo pipefail

cd "$(dirname "$0")/.."

readonly HOST=127.0.0.1
readonly PG_DEFAULT_PORT=${SQLLOCK_TEST_PG_PORT:-5432}
readonly MY_PORT=${SQLLOCK_TEST_MY_PORT:-3306}
readonly DB=test
readonly WAIT_SECONDS=60 # bound on every wait for a server to start

# log: a line on standard error, with the time since the script started.
log() { printf 'test.sh: [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
die() {
	printf 'test.sh: error: %s\n' "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }
can_apt() { is_root && [ -f /etc/debian_version ] && have apt-get; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	if have timeout; then
		timeout 3 bash -c ": </dev/tcp/$HOST/$1" 2>/dev/null
	else
		bash -c ": </dev/tcp/$HOST/$1" 2>/dev/null
	fi
}

# redact URL-or-DSN: hide a password, for printing.
redact() {
	if [[ $1 == *://* ]]; then # URL
		sed -E 's#^([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]*):[^@/]*@#\1:xxxxx@#; s#([?&]password=)[^&]*#\1xxxxx#' <<<"$1"
	elif [[ $1 =~ ^[a-z_]+= ]]; then # key=value connection string
		sed -E 's#(password=)[^ ]*#\1xxxxx#' <<<"$1"
	else # go-sql-driver DSN: user:pass@tcp(host)/db
		sed -E 's#^([^:@/()]*):.*@([a-z]*\(|/)#\1:xxxxx@\2#' <<<"$1"
	fi
}

# ---------------------------------------------------------------- arguments

# Split the arguments into go test flags and packages, so that vet and test
# run on the given packages only (default ./...). The flags go after the
# packages on the go test command line (before them, an unknown test flag
# would take the first package for its value). Flags that take a separate
# value are listed so their value is not taken for a package.
flags=()
pkgs=()
tail_args=()
takes_value() {
	case ${1#-} in
	-*) takes_value "${1#-}" ;;
	run | skip | bench | benchtime | count | cpu | parallel | timeout | shuffle | list | \
		fuzz | fuzztime | fuzzminimizetime | coverprofile | covermode | coverpkg | \
		cpuprofile | memprofile | memprofilerate | blockprofile | blockprofilerate | \
		mutexprofile | mutexprofilefraction | trace | outputdir | o | exec | tags | \
		ldflags | gcflags | asmflags | mod | modfile | p | C | overlay | pgo | toolexec | vet) return 0 ;;
	*) return 1 ;;
	esac
}
while [ $# -gt 0 ]; do
	a=$1
	shift
	case $a in
	-args | --args)
		tail_args=("$a" "$@")
		break
		;;
	-*=*) flags+=("$a") ;;
	-*)
		flags+=("$a")
		if takes_value "$a" && [ $# -gt 0 ]; then
			flags+=("$1")
			shift
		fi
		;;
	*) pkgs+=("$a") ;;
	esac
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)

go_need=$(awk '$1 == "go" { print $2 }' go.mod)
go_fix="install Go $go_need or later from https://go.dev/dl/ (Debian's golang-go is older), e.g. tar -C /usr/local -xzf go$go_need.linux-amd64.tar.gz, then export PATH=/usr/local/go/bin:\$HOME/go/bin:\$PATH"
have go || die "go is not on PATH: $go_fix"
# An old go command fails later with a misleading message (go.work's
# "invalid go version", or a download error): check the version first.
# (From Go 1.21 on, the go command fetches the toolchain go.mod asks for by
# itself unless GOTOOLCHAIN=local: GOVERSION is then the fetched one's.)
go_have=$(go env GOVERSION 2>/dev/null || true)
go_have=${go_have#go}
if [ -z "$go_have" ] || [ "$(printf '%s\n%s\n' "$go_need" "$go_have" | sort -V | head -n 1)" != "$go_need" ]; then
	die "$(command -v go) is Go ${go_have:-of an unknown version}; this module needs Go $go_need: $go_fix"
fi

# ./... stands for every module's packages: in the workspace it would stop
# where a nested module's go.mod begins.
expanded=()
every_module=""
for p in "${pkgs[@]}"; do
	if [ "$p" = ./... ]; then
		every_module=1
		mapfile -t -O "${#expanded[@]}" expanded < <(bash scripts/modules.sh)
	else
		expanded+=("$p")
	fi
done
pkgs=("${expanded[@]}")

# ---------------------------------------------------------------- installing

# Packages to install, collected for both servers so apt-get runs once.
missing_pkgs=()
missing_why=()
need() { # need PACKAGE WHY
	missing_pkgs+=("$1")
	missing_why+=("$2")
}

install_missing() {
	[ ${#missing_pkgs[@]} -gt 0 ] || return 0
	local why
	why=$(printf '%s, ' "${missing_why[@]}")
	why=${why%, }
	if ! can_apt; then
		die "missing: $why.
  Install them (Debian/Ubuntu: apt-get install -y ${missing_pkgs[*]}; as root this
  script does it itself), or point the tests at running servers with
  SQLLOCK_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
  and SQLLOCK_TEST_MYSQL_DSN (e.g. root@tcp(127.0.0.1:3306)/test)."
	fi
	log "installing ${missing_pkgs[*]} with apt-get (missing: $why; output in $apt_log)"
	# A cluster created by installing postgresql is ours to configure.
	[[ " ${missing_pkgs[*]} " != *" postgresql "* ]] || pg_created=1
	export DEBIAN_FRONTEND=noninteractive
	{
		apt-get -q update &&
			apt-get -q install -y --no-install-recommends "${missing_pkgs[@]}"
	} >"$apt_log" 2>&1 || {
		tail -n 25 "$apt_log" >&2
		die "apt-get install -y --no-install-recommends ${missing_pkgs[*]} failed (whole output in $apt_log)"
	}
	missing_pkgs=()
	missing_why=()
}
apt_log=${TMPDIR:-/tmp}/sqllock-test-apt.log

# tools_plan: the prerequisites besides the servers.
tools_plan() {
	# go test -race needs cgo, and the go command turns cgo off when it
	# finds no C compiler; compiling needs the C library's headers too
	# (which gcc only recommends on Debian).
	local cc
	cc=$(go env CC 2>/dev/null || true)
	cc=${cc:-gcc}
	if ! have "$cc"; then
		need gcc "a C compiler (go test -race needs cgo)"
		need libc6-dev "the C library's headers (for cgo)"
	elif ! printf '#include <stdlib.h>\nint main(void) { return 0; }\n' | "$cc" -x c -o /dev/null - >/dev/null 2>&1; then
		need libc6-dev "the C library's headers (for cgo; $cc cannot compile a C file)"
	fi
	# The console's browser test (cmd/sqllock, TestServeInBrowser) drives
	# Debian's headless Chromium; without apt-get it skips (fails under CI).
	if ! have chromium && can_apt; then
		need chromium "Chromium (the console's browser test)"
	fi
	# The Python client of the lock protocol (examples/python) runs on
	# Debian's python3 with psycopg2, and with MySQLdb on MariaDB; without
	# apt-get its tests skip (fail under CI).
	if ! /usr/bin/python3 -c 'import psycopg2' >/dev/null 2>&1 && can_apt; then
		need python3-psycopg2 "psycopg2 (the Python client's tests)"
	fi
	if ! /usr/bin/python3 -c 'import MySQLdb' >/dev/null 2>&1 && can_apt; then
		need python3-mysqldb "MySQLdb (the Python client's tests on MariaDB)"
	fi
	# The Node client (examples/node) runs on node, with the npm packages
	# pg and mysql2 that its test installs (npm ci, from package-lock.json,
	# into examples/node/node_modules, again only when the lock file
	# changes); without apt-get its tests skip (fail under CI). A Node.js
	# from elsewhere (NodeSource's package) brings its own npm.
	if ! have node && can_apt; then
		need nodejs "Node.js (the Node client's tests)"
	fi
	if ! have npm && can_apt; then
		need npm "npm (installs the Node client's packages)"
	fi
	# The module's dependencies come over HTTPS (proxy.golang.org).
	local f
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
		[ ! -s "$f" ] || return 0
	done
	[ "$(go env GOPROXY)" = off ] || need ca-certificates "CA certificates (go downloads the dependencies over HTTPS)"
}

# tools_check: after installing, fail early and clearly rather than an hour
# into the run.
tools_check() {
	[ "$(go env CGO_ENABLED)" = 1 ] || die "cgo is disabled (CGO_ENABLED=$(go env CGO_ENABLED)), and go test -race needs it: install gcc (Debian: apt-get install -y --no-install-recommends gcc libc6-dev) or unset CGO_ENABLED"
	# Only what the packages under test need: go mod download would fetch
	# every module of the workspace's build list, most of them never built.
	log "downloading the dependencies of ${pkgs[*]} (go list -deps -test)"
	go list -deps -test "${pkgs[@]}" >/dev/null || die "downloading the dependencies failed: check the network and CA certificates (Debian: apt-get install -y ca-certificates), or GOPROXY"
}

# Servers this run started, and how to stop them: printed at the end.
started=()
report_started() {
	local s
	for s in ${started[@]+"${started[@]}"}; do
		log "started by this run, still running: $s"
	done
}

# ---------------------------------------------------------------- PostgreSQL

pg_port=$PG_DEFAULT_PORT
pg_how=""      # how the server was found, for the summary line
pg_user=""
pg_ver=""      # cluster to start: version
pg_created=""  # set if this run created the cluster (or installed it)

pg_url() { printf 'postgres://%s@%s:%s/%s?sslmode=disable' "$1" "$HOST" "$pg_port" "$2"; }

# pg_q USER DATABASE SQL: run SQL over TCP without ever prompting for a password.
pg_q() { PGCONNECT_TIMEOUT=5 psql -w -X -q -A -t -v ON_ERROR_STOP=1 -d "$(pg_url "$1" "$2")" -c "$3"; }

# pg_login: find a user that can log in without a password and make sure
# database test exists. Sets pg_user.
pg_login() {
	local u
	for u in postgres root; do
		if pg_q "$u" "$DB" 'SELECT 1' >/dev/null 2>&1; then
			pg_user=$u
			return 0
		fi
		if pg_q "$u" postgres 'SELECT 1' >/dev/null 2>&1; then
			pg_user=$u
			if [ -z "$(pg_q "$u" postgres "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]; then
				log "PostgreSQL: creating database $DB"
				# Another run may create it at the same time: check again on failure.
				pg_q "$u" postgres "CREATE DATABASE $DB" >/dev/null 2>&1 ||
					[ -n "$(pg_q "$u" postgres "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ] ||
					die "PostgreSQL: cannot create database $DB as $u"
			fi
			return 0
		fi
	done
	return 1
}

pg_login_or_die() {
	pg_login || die "PostgreSQL at $HOST:$pg_port accepts TCP connections, but neither user postgres nor root can log in without a password.
  Allow it (pg_hba.conf: 'host all all 127.0.0.1/32 trust'), or set SQLLOCK_TEST_POSTGRES_URL to a URL with credentials."
}

# pg_plan: decide, before installing anything, whether PostgreSQL must be
# installed and started.
pg_plan() {
	if [ -n "${SQLLOCK_TEST_POSTGRES_URL:-}" ]; then
		pg_how="from SQLLOCK_TEST_POSTGRES_URL"
		return
	fi
	if port_open "$pg_port"; then
		pg_how="found running"
		have psql || need postgresql-client "psql (PostgreSQL client)"
		return
	fi
	pg_how="started"
	if ! have pg_ctlcluster || ! have pg_isready || ! have psql || ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		need postgresql "PostgreSQL server"
	fi
}

# pg_trust_local: let every user log in over TCP from 127.0.0.1 without a
# password. Only for a cluster this run created.
pg_trust_local() {
	local hba
	hba=$(pg_conftool "$pg_ver" main show -s hba_file 2>/dev/null) || hba=/etc/postgresql/$pg_ver/main/pg_hba.conf
	[ -f "$hba" ] || die "PostgreSQL: $hba not found"
	if ! grep -Eq '^[[:space:]]*host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
		log "PostgreSQL: allowing passwordless TCP logins from $HOST in $hba"
		# First matching line wins: put ours first. cat > keeps owner and mode.
		local tmp
		tmp=$(mktemp)
		{ printf '# added by sqllock scripts/test.sh\nhost all all 127.0.0.1/32 trust\n'; cat "$hba"; } >"$tmp"
		cat "$tmp" >"$hba"
		rm -f "$tmp"
	fi
}

pg_start() {
	# shellcheck disable=SC2012 # version directories have plain names
	pg_ver=$(ls /etc/postgresql 2>/dev/null | head -1 || true)
	if [ -z "$pg_ver" ] || [ ! -d "/etc/postgresql/$pg_ver/main" ]; then
		# shellcheck disable=SC2012
		[ -n "$pg_ver" ] || pg_ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1 || true)
		[ -n "$pg_ver" ] || die "PostgreSQL: no server version under /usr/lib/postgresql"
		is_root || die "PostgreSQL: no cluster; create one as root: pg_createcluster $pg_ver main -p $PG_DEFAULT_PORT"
		log "PostgreSQL: creating cluster $pg_ver/main"
		pg_createcluster "$pg_ver" main -p "$PG_DEFAULT_PORT" >/dev/null || die "pg_createcluster $pg_ver main failed"
		pg_created=1
	fi
	# The cluster's own port (pg_createcluster picks another if 5432 was
	# taken), unless this run created the cluster and a port was asked for.
	local p
	p=$(pg_lsclusters -h 2>/dev/null | awk -v v="$pg_ver" '$1 == v && $2 == "main" { print $3 }' || true)
	if [ -n "$pg_created" ] && [ -n "${SQLLOCK_TEST_PG_PORT:-}" ] && [ "$p" != "$pg_port" ]; then
		log "PostgreSQL: setting the port of cluster $pg_ver/main to $pg_port"
		pg_conftool "$pg_ver" main set port "$pg_port" || die "PostgreSQL: cannot set the port of $pg_ver/main"
	elif [ -n "$p" ]; then
		pg_port=$p
	fi
	[ -z "$pg_created" ] || pg_trust_local
	if is_root; then
		install -d -o postgres -g postgres -m 2775 /var/run/postgresql 2>/dev/null || true
	fi
	if pg_ctlcluster "$pg_ver" main status >/dev/null 2>&1; then
		# Already running (e.g. started by the package's postinst): reload in
		# case pg_hba.conf changed.
		[ -z "$pg_created" ] || pg_ctlcluster --skip-systemctl-redirect "$pg_ver" main reload || true
	else
		log "PostgreSQL: starting cluster $pg_ver/main on port $pg_port"
		pg_ctlcluster --skip-systemctl-redirect "$pg_ver" main start ||
			die "PostgreSQL: pg_ctlcluster $pg_ver main start failed (see /var/log/postgresql/postgresql-$pg_ver-main.log).
  Start it as root (pg_ctlcluster $pg_ver main start), run this script as root, or set SQLLOCK_TEST_POSTGRES_URL."
		started+=("PostgreSQL $pg_ver/main on $HOST:$pg_port; stop it with: pg_ctlcluster $pg_ver main stop")
	fi
	local i
	for ((i = 0; i < WAIT_SECONDS; i++)); do
		if pg_isready -q -h "$HOST" -p "$pg_port" -t 1; then
			return 0
		fi
		sleep 1
	done
	die "PostgreSQL: not ready on $HOST:$pg_port after ${WAIT_SECONDS}s (see /var/log/postgresql/postgresql-$pg_ver-main.log)"
}

pg_setup() {
	case $pg_how in
	"from "*) ;;
	"found running")
		pg_login_or_die
		export SQLLOCK_TEST_POSTGRES_URL
		SQLLOCK_TEST_POSTGRES_URL=$(pg_url "$pg_user" "$DB")
		;;
	started)
		pg_start
		pg_login_or_die
		export SQLLOCK_TEST_POSTGRES_URL
		SQLLOCK_TEST_POSTGRES_URL=$(pg_url "$pg_user" "$DB")
		;;
	esac
}

# ---------------------------------------------------------------- MariaDB/MySQL

my_how=""
my_cli=""   # mariadb or mysql
my_admin="" # mariadb-admin or mysqladmin
my_bin=""   # server binary
my_log=${TMPDIR:-/tmp}/sqllock-test-mariadb.log

my_find_tools() {
	my_cli=$(command -v mariadb || command -v mysql || true)
	my_admin=$(command -v mariadb-admin || command -v mysqladmin || true)
	local b
	for b in /usr/sbin/mariadbd /usr/sbin/mysqld; do
		if [ -x "$b" ]; then
			my_bin=$b
			break
		fi
	done
}

# my_tcp SQL: run SQL as root with an empty password over TCP, ignoring
# option files (so a password in ~/.my.cnf cannot hide a failure the Go
# driver would see).
my_tcp() { "$my_cli" --no-defaults --protocol=TCP -h "$HOST" -P "$MY_PORT" -u root --connect-timeout=5 -N -B -e "$1"; }

# my_socket SQL: run SQL as root over the Unix socket (unix_socket auth).
my_socket() { "$my_cli" -u root --connect-timeout=5 -N -B -e "$1"; }

my_create_db() {
	my_tcp "CREATE DATABASE IF NOT EXISTS \`$DB\`" >/dev/null || die "MariaDB/MySQL: cannot create database $DB as root"
}

my_plan() {
	my_find_tools
	if [ -n "${SQLLOCK_TEST_MYSQL_DSN:-}" ]; then
		my_how="from SQLLOCK_TEST_MYSQL_DSN"
		return
	fi
	if port_open "$MY_PORT"; then
		my_how="found running"
		[ -n "$my_cli" ] || need mariadb-client "mariadb (MariaDB client)"
		return
	fi
	my_how="started"
	if [ -z "$my_bin" ] || [ -z "$my_cli" ] || [ -z "$my_admin" ] || { ! have mariadb-install-db && ! have mysql_install_db; }; then
		need mariadb-server "MariaDB server"
	fi
}

my_start() {
	is_root || die "MariaDB/MySQL is installed but not running on $HOST:$MY_PORT; start it (as root this script does), or set SQLLOCK_TEST_MYSQL_DSN"
	[ -n "$my_bin" ] || die "MariaDB: no server binary in /usr/sbin"
	local datadir
	datadir=$("$my_bin" --verbose --help 2>/dev/null | awk '$1 == "datadir" { print $2; exit }' || true)
	datadir=${datadir:-/var/lib/mysql}
	datadir=${datadir%/}
	install -d -o mysql -g mysql -m 755 /run/mysqld
	if [ ! -d "$datadir/mysql" ]; then
		log "MariaDB: initialising $datadir"
		install -d -o mysql -g mysql -m 755 "$datadir"
		local installer
		installer=$(command -v mariadb-install-db || command -v mysql_install_db) || die "MariaDB: mariadb-install-db not found"
		"$installer" --user=mysql --datadir="$datadir" >"$my_log" 2>&1 ||
			die "MariaDB: $installer failed; see $my_log"
	fi
	log "MariaDB: starting $my_bin (output in $my_log)"
	local args=(--user=mysql --bind-address="$HOST" --port="$MY_PORT")
	if have start-stop-daemon; then
		local out=() help
		help=$(start-stop-daemon --help 2>&1 || true)
		[[ $help != *--output* ]] || out=(--output "$my_log")
		# A pid file of our own: matched by --exec alone, any other mariadbd
		# (another instance, a container's, or the host's seen from a
		# chroot) would count as already running.
		start-stop-daemon --start --oknodo --background ${out[@]+"${out[@]}"} \
			--make-pidfile --pidfile /run/mysqld/sqllock-test.pid --exec "$my_bin" -- "${args[@]}" ||
			die "MariaDB: start-stop-daemon --start --exec $my_bin failed"
	else
		nohup "$my_bin" "${args[@]}" >"$my_log" 2>&1 &
	fi
	local i
	for ((i = 0; i < WAIT_SECONDS; i++)); do
		# ping succeeds once the server answers, even if it denies access,
		# except that a server skipping name resolution refuses 127.0.0.1
		# until root@127.0.0.1 exists: so also ask over the Unix socket.
		if "$my_admin" -u root --connect-timeout=2 ping >/dev/null 2>&1 ||
			"$my_admin" --no-defaults --protocol=TCP -h "$HOST" -P "$MY_PORT" -u root --connect-timeout=2 ping >/dev/null 2>&1; then
			break
		fi
		sleep 1
	done
	[ "$i" -lt "$WAIT_SECONDS" ] || die "MariaDB: not ready on $HOST:$MY_PORT after ${WAIT_SECONDS}s (see $my_log and the server's error log, e.g. /var/log/mysql/error.log)"
	started+=("MariaDB ($my_bin) on $HOST:$MY_PORT; stop it with: $my_admin -u root shutdown")

	# A fresh Debian MariaDB lets root in only over the Unix socket
	# (unix_socket auth): also accept an empty password, and, for servers that
	# skip name resolution (so 127.0.0.1 is not "localhost"), add root@127.0.0.1.
	if ! my_tcp 'SELECT 1' >/dev/null 2>&1; then
		log "MariaDB: letting root log in over TCP with an empty password"
		my_socket "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')" || true
		if ! my_tcp 'SELECT 1' >/dev/null 2>&1; then
			my_socket "CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION" || true
		fi
	fi
}

my_setup() {
	case $my_how in
	"from "*) ;;
	"found running" | started)
		[ "$my_how" != started ] || my_start
		my_tcp 'SELECT 1' >/dev/null 2>&1 || die "MariaDB/MySQL at $HOST:$MY_PORT accepts TCP connections, but root cannot log in with an empty password.
  Allow it (e.g. CREATE USER root@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO root@'127.0.0.1'),
  or set SQLLOCK_TEST_MYSQL_DSN to a DSN with credentials."
		my_create_db
		export SQLLOCK_TEST_MYSQL_DSN="root@tcp($HOST:$MY_PORT)/$DB"
		;;
	esac
}

# ---------------------------------------------------------------- PgBouncer
#
# Two PgBouncer processes of this run's own, in front of the PostgreSQL
# above, on free loopback ports, in a temporary directory: one in
# transaction pooling, one in session pooling. Any database name is passed
# through to the server (`* =`), so a URL differs from the server's in its
# port only. Exported as SQLLOCK_TEST_PGBOUNCER_TX_URL and
# SQLLOCK_TEST_PGBOUNCER_SESSION_URL (when both are set already, they are
# used as they are); stopped, by the PIDs they wrote, when this script
# exits. Without a pgbouncer binary (and no apt-get to install it), the
# tests that need it skip, or fail under CI.

pgb_dir=""
pgb_how=""
pgb_url=""
pgb_pids=()
pgb_modes=()
pgb_run_as=()
pgb_watch_pid=""

pgb_plan() {
	if [ -n "${SQLLOCK_TEST_PGBOUNCER_TX_URL:-}" ] && [ -n "${SQLLOCK_TEST_PGBOUNCER_SESSION_URL:-}" ]; then
		pgb_how="from SQLLOCK_TEST_PGBOUNCER_*_URL"
		return
	fi
	pgb_how="started"
	pgb_bin >/dev/null && return
	if can_apt; then
		need pgbouncer "PgBouncer"
	else
		pgb_how="missing"
	fi
}

# pgb_bin: the pgbouncer binary (Debian puts it in /usr/sbin).
pgb_bin() { command -v pgbouncer || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }; }

# pgb_free_port: a TCP port nothing listens on at 127.0.0.1.
pgb_free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		# Below Linux's ephemeral range (32768 up), which outgoing
		# connections take their local ports from.
		p=$((20000 + RANDOM % 12000))
		port_open "$p" || {
			echo "$p"
			return 0
		}
	done
	die "PgBouncer: no free port found"
}

# pgb_stop: stop the PgBouncers this run started (and their watchdog), by
# PID: the ones they wrote at start, and the ones a restart wrote since.
pgb_stop() {
	local pid mode
	if [ -n "$pgb_watch_pid" ]; then
		kill "$pgb_watch_pid" 2>/dev/null || true
		wait "$pgb_watch_pid" 2>/dev/null || true
		pgb_watch_pid=""
	fi
	for mode in ${pgb_modes[@]+"${pgb_modes[@]}"}; do
		pid=$(cat "$pgb_dir/$mode.pid" 2>/dev/null) && pgb_pids+=("$pid")
	done
	for pid in ${pgb_pids[@]+"${pgb_pids[@]}"}; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in ${pgb_pids[@]+"${pgb_pids[@]}"}; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
	done
	pgb_pids=()
	pgb_modes=()
	[ -z "$pgb_dir" ] || rm -rf "$pgb_dir"
}

# pgb_watch: restarts, on its own port, a PgBouncer of this run that
# exited, and notes the end of its log in $pgb_dir/crashes. Debian 12's
# PgBouncer 1.18 exits on a FATAL error now and then when a cancel request
# races with the end of the statement it cancels (pgbouncer#822, #847,
# fixed in 1.19.1 and 1.21); the tests send many. Runs in the background
# until pgb_stop.
pgb_watch() {
	trap - EXIT
	local mode pid i
	while sleep 1; do
		for mode in "${pgb_modes[@]}"; do
			pid=$(cat "$pgb_dir/$mode.pid" 2>/dev/null) || pid=""
			if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
				continue
			fi
			printf '%s PgBouncer (%s pooling) exited; its log ended with:\n%s\n' "$(date +%T)" "$mode" \
				"$(pgb_last_words "$pgb_dir/$mode.log" | sed 's/^/    /')" >>"$pgb_dir/crashes"
			log "PgBouncer ($mode pooling) exited during the run; restarting it on its port ($pgb_dir/crashes)"
			rm -f "$pgb_dir/$mode.pid"
			if ${pgb_run_as[@]+"${pgb_run_as[@]}"} "$(pgb_bin)" -d "$pgb_dir/$mode.ini" >>"$pgb_dir/$mode.out" 2>&1; then
				for ((i = 0; i < WAIT_SECONDS * 5; i++)); do
					[ -s "$pgb_dir/$mode.pid" ] && break
					sleep 0.2
				done
			else
				log "PgBouncer ($mode pooling): restart failed: $(tail -3 "$pgb_dir/$mode.out")"
			fi
		done
	done
}

# pgb_last_words LOG: the FATAL lines near the end of a PgBouncer's log,
# and its last line.
pgb_last_words() {
	tail -50 "$1" 2>/dev/null | grep -E 'FATAL|@src/' | tail -3 || true
	tail -1 "$1" 2>/dev/null || true
}

# pgb_crashes: how many times a PgBouncer of this run exited so far.
pgb_crashes() {
	if [ -n "$pgb_dir" ] && [ -f "$pgb_dir/crashes" ]; then
		grep -c ' exited; ' "$pgb_dir/crashes"
	else
		echo 0
	fi
}

# pgb_start MODE POOL_SIZE: start a PgBouncer in pool_mode MODE; its URL
# is left in pgb_url. A free port can be taken by another process before
# PgBouncer binds it: then another port is tried, five times at most.
pgb_start() {
	local attempt
	for attempt in 1 2 3 4 5; do
		pgb_start_once "$@" && return 0
		grep -q "nowhere to listen" "$pgb_dir/$1.log" 2>/dev/null ||
			die "PgBouncer ($1): not started: $(tail -5 "$pgb_dir/$1.log" 2>/dev/null)"
		log "PgBouncer ($1): its port was taken before it could listen; trying another (attempt $attempt)"
	done
	die "PgBouncer ($1): no port it could listen on after 5 tries"
}

# pgb_start_once MODE POOL_SIZE: one try of pgb_start; fails if PgBouncer
# did not start.
pgb_start_once() {
	local mode=$1 size=$2 bin port url user pass host sport db run_as=()
	bin=$(pgb_bin) || die "PgBouncer: pgbouncer not found"
	# The server, user and password of the PostgreSQL URL.
	url=${SQLLOCK_TEST_POSTGRES_URL#*://}
	[[ $url =~ ^(([^:@/]*)(:([^@/]*))?@)?([^:/?]+)(:([0-9]+))?/([^?]*) ]] ||
		die "PgBouncer: cannot parse SQLLOCK_TEST_POSTGRES_URL ($(redact "$SQLLOCK_TEST_POSTGRES_URL"))"
	user=${BASH_REMATCH[2]:-postgres} pass=${BASH_REMATCH[4]} host=${BASH_REMATCH[5]}
	sport=${BASH_REMATCH[7]:-5432} db=${BASH_REMATCH[8]:-$DB}
	port=$(pgb_free_port)
	printf '"%s" "%s"\n' "$user" "$pass" >"$pgb_dir/users.txt"
	cat >"$pgb_dir/$mode.ini" <<-EOF
		[databases]
		* = host=$host port=$sport
		[pgbouncer]
		listen_addr = $HOST
		listen_port = $port
		unix_socket_dir =
		auth_type = trust
		auth_file = $pgb_dir/users.txt
		pool_mode = $mode
		default_pool_size = $size
		max_client_conn = 2000
		ignore_startup_parameters = extra_float_digits
		logfile = $pgb_dir/$mode.log
		pidfile = $pgb_dir/$mode.pid
	EOF
	# PgBouncer refuses to run as root.
	if is_root; then
		local u=nobody
		id postgres >/dev/null 2>&1 && u=postgres
		chown -R "$u" "$pgb_dir"
		run_as=(runuser -u "$u" --)
		pgb_run_as=("${run_as[@]}")
	fi
	rm -f "$pgb_dir/$mode.log" "$pgb_dir/$mode.pid"
	${run_as[@]+"${run_as[@]}"} "$bin" -d "$pgb_dir/$mode.ini" >"$pgb_dir/$mode.out" 2>&1 ||
		die "PgBouncer ($mode): $bin failed to start: $(tail -5 "$pgb_dir/$mode.out")"
	local i
	for ((i = 0; i < WAIT_SECONDS * 5; i++)); do
		[ -s "$pgb_dir/$mode.pid" ] && port_open "$port" && break
		grep -q "nowhere to listen" "$pgb_dir/$mode.log" 2>/dev/null && return 1
		sleep 0.2
	done
	[ -s "$pgb_dir/$mode.pid" ] || return 1
	pgb_pids+=("$(cat "$pgb_dir/$mode.pid")")
	pgb_modes+=("$mode")
	port_open "$port" || die "PgBouncer ($mode): not listening on $HOST:$port: $(tail -5 "$pgb_dir/$mode.log")"
	pgb_url="postgres://$user${pass:+:$pass}@$HOST:$port/$db?sslmode=disable"
}

pgb_setup() {
	case $pgb_how in
	"from "*) ;;
	missing)
		[ -z "${CI:-}" ] || die "PgBouncer is not installed (Debian: apt-get install -y pgbouncer; as root this script does it itself)"
		log "PgBouncer is not installed: the tests through it skip (Debian: apt-get install -y pgbouncer)"
		;;
	started)
		pgb_dir=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-pgbouncer.XXXXXX")
		chmod 755 "$pgb_dir" # stopped by on_exit
		# Transaction pooling shares a few server connections among every
		# client; session pooling needs one per client connection.
		pgb_start transaction 10
		SQLLOCK_TEST_PGBOUNCER_TX_URL=$pgb_url
		pgb_start session 30
		SQLLOCK_TEST_PGBOUNCER_SESSION_URL=$pgb_url
		export SQLLOCK_TEST_PGBOUNCER_TX_URL SQLLOCK_TEST_PGBOUNCER_SESSION_URL
		pgb_watch &
		pgb_watch_pid=$!
		;;
	esac
}

# ---------------------------------------------------------------- main

# SQLLOCK_TEST_DATABASES (internal/dbtest), when set, lists the databases to
# test against (postgres, mysql, sqlite): servers left out are neither found
# nor started, and their tests are skipped.
selected() { [ -z "${SQLLOCK_TEST_DATABASES:-}" ] || [[ ",${SQLLOCK_TEST_DATABASES// /}," == *",$1,"* ]]; }

# on_exit: what this run leaves behind is cleaned up (its PgBouncers and
# their watchdog, the chaos report, the last step's output) or reported
# (servers it started and leaves running).
on_exit() {
	rm -f "${chaos_report:-}" "${step_out:-}"
	pgb_stop
	report_started
}
trap on_exit EXIT
tools_plan
if selected postgres; then pg_plan; else pg_how="not selected"; fi
if selected mysql; then my_plan; else my_how="not selected"; fi
if selected postgres; then pgb_plan; else pgb_how="not selected"; fi
install_missing
tools_check
if selected mysql && [ "$my_how" != "from SQLLOCK_TEST_MYSQL_DSN" ]; then
	my_find_tools # after installing
fi
! selected postgres || pg_setup
! selected mysql || my_setup
! selected postgres || pgb_setup
report_started

log "PostgreSQL: $(redact "${SQLLOCK_TEST_POSTGRES_URL:--}") ($pg_how); MySQL: $(redact "${SQLLOCK_TEST_MYSQL_DSN:--}") ($my_how)"
[ -z "${SQLLOCK_TEST_PGBOUNCER_TX_URL:-}" ] ||
	log "PgBouncer: transaction pooling $(redact "$SQLLOCK_TEST_PGBOUNCER_TX_URL"), session pooling $(redact "$SQLLOCK_TEST_PGBOUNCER_SESSION_URL") ($pgb_how)"

# scripts/bench.sh sources this file for the servers alone.
if [ -n "${SQLLOCK_SETUP_ONLY:-}" ]; then
	return 0 2>/dev/null || exit 0
fi

log "go vet ${pkgs[*]}"
go vet "${pkgs[@]}"
# go.work lets a module build with a package its own go.mod does not
# provide; a user of that module alone could not.
if [ -n "$every_module" ]; then
	log "checking that every module's go.mod and go.sum are tidy (scripts/tidy.sh -diff)"
	bash scripts/tidy.sh -diff
fi
# The chaos suite (tests/chaos) loads both cores with worker processes
# and faults; beside other packages it would starve their short-TTL tests.
# So the packages run in two steps: everything else, then the chaos suite.
# The timeout only catches a hung test: cmd/sqllock alone takes 9 minutes
# on the quiet machine and about twice that on a busy one.
#
# go test starts the packages in the order given, two at a time (-p, the
# cores): the longest ones (the command's, then the core's) go first, so
# that the rest fill the other core beside them instead of leaving one
# of them alone at the end.
chaos_pkg=github.com/sqllock/sqllock/tests/chaos
longest=(github.com/sqllock/sqllock/cmd/sqllock github.com/sqllock/sqllock)
mapfile -t all_pkgs < <(go list "${pkgs[@]}")
rest=()
chaos=()
for p in "${longest[@]}"; do
	[[ " ${all_pkgs[*]} " != *" $p "* ]] || rest+=("$p")
done
for p in "${all_pkgs[@]}"; do
	if [ "$p" = "$chaos_pkg" ]; then
		chaos=("$p")
	elif [[ " ${longest[*]} " != *" $p "* ]]; then
		rest+=("$p")
	fi
done

# The chaos suite's summary (operations, faults, violations per scenario),
# which go test would hide for a passing package.
chaos_report="$(mktemp)"
step_out="$(mktemp)"

# failed_tests OUT: from go test's output OUT, a line per package that
# failed: the package, then the top-level tests that failed in it
# (TestA|TestB), or nothing when the package failed without naming one (a
# panic, a timeout, a build failure).
failed_tests() {
	awk '
		/^--- FAIL: / { names = names (names == "" ? "" : "|") $3; next }
		/^panic: / { whole = 1; next }
		/^(ok|FAIL|\?)[ \t]/ && NF >= 2 {
			if ($1 == "FAIL") print $2 (whole || names == "" ? "" : " " names)
			names = ""; whole = 0
		}
	' "$1"
}

# go_test [-run RE] PKG...: go test of the packages with the script's
# flags, and -run RE after them (the last -run is the one go test uses).
go_test() {
	local run=()
	if [ "$1" = -run ]; then
		run=(-run "$2")
		shift 2
	fi
	local args=("$@" ${flags[@]+"${flags[@]}"} ${run[@]+"${run[@]}"} ${tail_args[@]+"${tail_args[@]}"})
	log "go test -race -shuffle=on -timeout 45m ${args[*]}"
	SQLLOCK_CHAOS_REPORT="$chaos_report" go test -race -shuffle=on -timeout 45m "${args[@]}" 2>&1 | tee "$step_out"
}

# A step whose tests failed while a PgBouncer of this run crashed (see
# pgb_watch) runs the tests that failed once more, on the restarted
# PgBouncer: PgBouncer's crash must not fail the run, and a failure of
# ours fails again. Nothing else runs twice.
status=0
for step in rest chaos; do
	declare -n step_pkgs=$step
	[ ${#step_pkgs[@]} -gt 0 ] || continue
	crashes=$(pgb_crashes)
	step_status=0
	go_test "${step_pkgs[@]}" || step_status=$?
	if [ "$step_status" != 0 ] && [ "$(pgb_crashes)" != "$crashes" ]; then
		log "a PgBouncer of this run exited during these tests, and was restarted:"
		tail -n +1 "$pgb_dir/crashes" >&2
		mapfile -t failed < <(failed_tests "$step_out")
		whole=() again=() names=()
		for f in ${failed[@]+"${failed[@]}"}; do
			read -r pkg tests <<<"$f"
			if [ -z "$tests" ]; then
				whole+=("$pkg")
			else
				again+=("$pkg")
				names+=("$tests")
			fi
		done
		if [ ${#failed[@]} -gt 0 ]; then
			log "running the tests that failed once more"
			step_status=0
		fi
		[ ${#whole[@]} -eq 0 ] || go_test "${whole[@]}" || step_status=$?
		[ ${#again[@]} -eq 0 ] || go_test -run "^($(IFS='|'; echo "${names[*]}"))\$" "${again[@]}" || step_status=$?
	fi
	[ "$step_status" = 0 ] || status=$step_status
done
# The console's browser test drives a headless Chromium, whose processes
# load both cores: beside the other tests it starved their leases (a
# renewal late by seconds). It runs last, alone (the test skips itself
# unless SQLLOCK_TEST_BROWSER is set).
browser_pkg=github.com/sqllock/sqllock/cmd/sqllock
if [[ " ${all_pkgs[*]} " == *" $browser_pkg "* ]]; then
	SQLLOCK_TEST_BROWSER=1 go_test -run '^TestServeInBrowser$' "$browser_pkg" || status=$?
fi
[ "$(pgb_crashes)" = 0 ] || log "PgBouncer exited $(pgb_crashes) time(s) during the run and was restarted: see above"
if [ -s "$chaos_report" ] && [[ " ${flags[*]:-} " != *" -v "* ]]; then
	cat "$chaos_report"
fi
log "done: exit status $status"
exit "$status"
