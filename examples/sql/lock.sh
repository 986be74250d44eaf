#!/bin/sh
# lock.sh: runs a command while holding a sqllock lock, through the lock
# protocol's PostgreSQL functions (docs/protocol.md) and psql.
#
#   SQLLOCK_URL=postgres://... SQLLOCK_SCHEMA=sqllock lock.sh NAME TTL_SECONDS COMMAND [ARG...]
#
# It waits for the lock (sleeping as long as the holder's lease has left),
# renews it every TTL/3 while COMMAND runs, stops COMMAND (SIGTERM) if a
# renewal fails, and releases the lock when COMMAND ends. It exits with
# COMMAND's status, or 75 when the lock was lost.
set -eu

[ $# -ge 3 ] || { echo "usage: $0 NAME TTL_SECONDS COMMAND [ARG...]" >&2; exit 64; }
name=$1 ttl=$2
shift 2
: "${SQLLOCK_URL:?set SQLLOCK_URL to the database URL}"
schema=${SQLLOCK_SCHEMA:-public}
# The owner is unique to this run: never reused.
owner="$(hostname)/$$/$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"

# sql QUERY: runs QUERY with :'name', :'owner', :'ttl', :'token' and
# :"schema" bound, and prints its one value.
sql() {
	printf '%s\n' "$1" | psql "$SQLLOCK_URL" -XAtq -v ON_ERROR_STOP=1 \
		-v name="$name" -v owner="$owner" -v ttl="$ttl seconds" -v token="${token:-0}" -v schema="$schema"
}

while :; do
	token=$(sql "SELECT :\"schema\".sqllock_try_acquire(:'name', :'owner', :'ttl'::interval)")
	[ -z "$token" ] || break
	left=$(sql "SELECT coalesce(extract(epoch FROM :\"schema\".sqllock_remaining(:'name')), 0)")
	# Sleep the lease's time left, at most a second: psql cannot LISTEN
	# while it sleeps.
	sleep "$(awk -v l="$left" 'BEGIN { print (l > 1 ? 1 : l) }')"
done

"$@" &
pid=$!
status_file=$(mktemp)
trap 'rm -f "$status_file"' EXIT
(
	period=$(awk -v t="$ttl" 'BEGIN { print t / 3 }')
	while sleep "$period"; do
		kill -0 "$pid" 2>/dev/null || exit 0
		if [ "$(sql "SELECT :\"schema\".sqllock_renew(:'name', :'owner', :'token'::bigint, :'ttl'::interval)")" != t ]; then
			echo lost >"$status_file"
			kill -TERM "$pid" 2>/dev/null
			exit 0
		fi
	done
) &
renewer=$!
status=0
wait "$pid" || status=$?
kill "$renewer" 2>/dev/null || true
wait "$renewer" 2>/dev/null || true
sql "SELECT :\"schema\".sqllock_release(:'name', :'owner', :'token'::bigint)" >/dev/null
if [ -s "$status_file" ]; then
	echo "$0: lost the lock $name" >&2
	exit 75
fi
exit "$status"
