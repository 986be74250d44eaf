#!/usr/bin/env bash
# scripts/fuzz.sh: runs every fuzz target of every package, in every module
# (scripts/modules.sh), for FUZZTIME (default 10s) each (`make fuzz` runs
# it) and fails if any target found a failing input.
#
# Fuzzing instruments every package a test binary links, the largest
# dependencies too (modernc.org/sqlite): each package with targets is
# built so once (go test -c -fuzz), and its targets run one after the
# other from that binary (go test -fuzz takes one target a run, and would
# link the binary again for each), in the package's directory, with go
# test's corpus cache ($GOCACHE/fuzz).
# FUZZFLAGS adds test flags to each run (e.g. FUZZFLAGS=-parallel=1 for
# one fuzzing worker instead of one per core, when other work shares the
# machine); -test. is prefixed to a flag that lacks it.
#
# One failure is not a finding and is not counted as one. Go 1.26's fuzzing
# coordinator can fail a target with a bare "context deadline exceeded" as
# its -fuzztime runs out (go.dev/issue/75804, fixed in Go 1.27): the deadline
# reaches the coordinator before its workers' context, and it reports the
# ordinary end of the run as an error. It happens on a loaded machine, with
# no input involved. A run that failed that way, wrote no failing input to
# testdata/fuzz/TARGET and printed nothing else is checked once more by
# replaying the target's seeds and stored corpus; if they pass, it counts as
# passed and says so. Anything else that fails, fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-10s}
out=$(mktemp)
bins=$(mktemp -d "${TMPDIR:-/tmp}/sqllock-fuzz.XXXXXX")
trap 'rm -rf "$out" "$bins"' EXIT
cachedir=$(go env GOCACHE)/fuzz

# FUZZFLAGS, as the test binary's flags.
flags=()
for f in ${FUZZFLAGS:-}; do
	case $f in
	-test.* | --test.* | [!-]*) flags+=("$f") ;;
	--*) flags+=("-test.${f#--}") ;;
	*) flags+=("-test.${f#-}") ;;
	esac
done

# corpus PKGDIR TARGET: the names of the target's stored inputs.
corpus() {
	ls "$1/testdata/fuzz/$2" 2>/dev/null || true
}

# coordinator_race TARGET: whether the run in $out failed only with the
# coordinator's deadline error.
coordinator_race() {
	[ "$(grep -c -- '^--- FAIL: ' "$out")" = 1 ] &&
		[ "$(grep -A1 -- "^--- FAIL: $1 " "$out" | tail -n 1)" = "    context deadline exceeded" ] &&
		! grep -q -e 'Failing input written' -e '^panic: ' -e 'fuzzing process hung' "$out"
}

# targets: "PKG DIR TARGET" per fuzz target, read from the packages' test
# files (func FuzzXxx(f *testing.F) at the top level) rather than listed by
# go test -list, which would build every package's test binary first.
targets() {
	local pkg dir files f
	while IFS=$'\t' read -r pkg dir files; do
		[ -n "$files" ] || continue
		for f in $files; do
			sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$dir/$f"
		done | sort -u | while read -r target; do
			printf '%s %s %s\n' "$pkg" "$dir" "$target"
		done
	done < <(go list -f '{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' "${patterns[@]}")
}

# Every module's packages (scripts/modules.sh).
mapfile -t patterns < <(bash scripts/modules.sh)

fail=0
n=0
while read -r pkg dir target; do
	n=$((n + 1))
	{
		bin=$bins/${pkg//\//_}.test
		if [ ! -e "$bin" ]; then
			echo "== building $pkg for fuzzing (go test -c -fuzz)"
			if ! go test -c -fuzz=. -o "$bin" "$pkg"; then
				fail=1
				touch "$bin" # not built again for its other targets
				continue
			fi
		fi
		[ -x "$bin" ] || continue
		echo "== $target ($pkg)"
		before=$(corpus "$dir" "$target")
		(cd "$dir" && "$bin" -test.paniconexit0 -test.run='^$' -test.fuzz="^$target\$" -test.fuzztime="$fuzztime" \
			-test.fuzzcachedir="$cachedir/$pkg" ${flags[@]+"${flags[@]}"}) 2>&1 | tee "$out"
		[ "${PIPESTATUS[0]}" = 0 ] && continue
		if [ "$(corpus "$dir" "$target")" = "$before" ] && coordinator_race "$target"; then
			echo "== $target: the fuzzing coordinator's deadline error (go.dev/issue/75804), no input failed; replaying the corpus"
			if (cd "$dir" && "$bin" -test.paniconexit0 -test.run="^$target\$"); then
				echo "== $target: corpus passes; counted as passed"
				continue
			fi
		fi
		fail=1
	} </dev/null
done < <(targets)
if [ "$n" = 0 ]; then
	echo "fuzz.sh: no fuzz target found" >&2
	exit 1
fi
exit $fail
