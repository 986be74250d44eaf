#!/usr/bin/env bash
# scripts/bench-peers.sh (make bench-peers): the peer benchmark (bench/peers)
# — sqllock against redsync, redislock, pg_advisory_lock and GET_LOCK in one
# run — with its raw output in bench/results-peers.txt and its chart in
# bench/peers.svg (drawn by internal/benchchart -peers). About 15 minutes
# on 2 busy cores; extra arguments go to the benchmark (-rounds 5,
# -systems redsync,sqllock-pg, ...: go run ./bench/peers -h).
#
# Redis: the machine's on 127.0.0.1:6379 if it answers, else a
# redis-server of its own (no persistence) on a free loopback port.
# PostgreSQL and MariaDB: servers of its own, from the system's binaries,
# on free loopback ports in a temporary directory (removed afterwards),
# with their default settings but max_connections: 51 processes with a pool
# and a listening connection each need more than the 100 a default server
# allows, and a server of its own counts the benchmark's statements alone.
# PEERS_POSTGRES_URL and PEERS_MYSQL_DSN use given servers instead;
# PEERS_OUT and PEERS_CHART other output files. As
# root the servers run as $SQLLOCK_HA_USER (default sqllockha, created if
# missing), as in scripts/test-ha.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-peers.XXXXXX")
chmod 755 "$dir"
pids=()
pgdata=""
cleanup() {
	[[ -z "$pgdata" ]] || as_server "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1 || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

# free_port: a loopback TCP port nothing listens on.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# wait_for CMD...: runs CMD until it succeeds, for up to 60 s.
wait_for() {
	local i
	for i in $(seq 600); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

server_user=""
if [[ "$(id -u)" == 0 ]]; then
	server_user="${SQLLOCK_HA_USER:-sqllockha}"
	id "$server_user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$server_user"
	chown "$server_user" "$dir"
fi
as_server() {
	if [[ -n "$server_user" ]]; then runuser -u "$server_user" -- "$@"; else "$@"; fi
}

redis=127.0.0.1:6379
if ! redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
	command -v redis-server >/dev/null || { echo "bench-peers: no Redis on 127.0.0.1:6379 and no redis-server (Debian: apt-get install -y redis-server)" >&2; exit 1; }
	port=$(free_port)
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
	pids+=($!)
	redis=127.0.0.1:$port
	wait_for redis-cli -h 127.0.0.1 -p "$port" ping || { cat "$dir/redis.log" >&2; exit 1; }
fi

pg=${PEERS_POSTGRES_URL:-}
if [[ -z "$pg" ]]; then
	pgbin="${SQLLOCK_HA_PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
	[[ -x "$pgbin/initdb" ]] || { echo "bench-peers: no PostgreSQL server binaries (apt-get install postgresql, or set PEERS_POSTGRES_URL)" >&2; exit 1; }
	port=$(free_port)
	pgdata=$dir/pg
	as_server "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
	printf "port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 400\n" "$port" "$dir" |
		as_server tee -a "$pgdata/postgresql.conf" >/dev/null
	as_server "$pgbin/pg_ctl" -D "$pgdata" -l "$dir/pg.log" -w -t 60 start >/dev/null
	pg="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
fi

my=${PEERS_MYSQL_DSN:-}
if [[ -z "$my" ]]; then
	command -v mariadbd >/dev/null || { echo "bench-peers: no mariadbd (apt-get install mariadb-server, or set PEERS_MYSQL_DSN)" >&2; exit 1; }
	port=$(free_port)
	as_server mariadb-install-db --no-defaults --datadir="$dir/my" --auth-root-authentication-method=normal --skip-test-db >"$dir/my-install.log" 2>&1 ||
		{ cat "$dir/my-install.log" >&2; exit 1; }
	as_server mariadbd --no-defaults --datadir="$dir/my" --port="$port" --bind-address=127.0.0.1 \
		--socket="$dir/my.sock" --pid-file="$dir/my.pid" --log-error="$dir/my.err" --max-connections=500 &
	pids+=($!)
	my="root@tcp(127.0.0.1:$port)/mysql"
	wait_for mysqladmin --protocol=tcp -h 127.0.0.1 -P "$port" -uroot ping || { cat "$dir/my.err" >&2; exit 1; }
fi

out=${PEERS_OUT:-bench/results-peers.txt}
chart=${PEERS_CHART:-bench/peers.svg}
(cd bench/peers && go build -o "$dir/peers" .)
"$dir/peers" -redis "$redis" -postgres "$pg" -mysql "$my" "$@" | tee "$out"
go run ./internal/benchchart -peers <"$out" >"$chart"
echo "bench-peers: wrote $out and $chart"
