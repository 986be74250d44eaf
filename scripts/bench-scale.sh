#!/usr/bin/env bash
# scripts/bench-scale.sh (make bench-scale): the scale curves of issue 49
# against the local servers (found or started as by scripts/test.sh), with
# the raw output in bench/results-scale.txt and the chart of
# BenchmarkScaleHeld in bench/scale.svg (drawn by internal/benchchart
# -scale):
#
#   BenchmarkScaleHeld          TryAcquire+Release beside 10 to 10^6 held leases
#   BenchmarkScaleReaper        one reaper pass over 10^6 expired leases, and
#                               the p99 of acquires beside it
#   BenchmarkScaleClientMemory  the client's heap per held lock (10^4 held)
#   BenchmarkScaleChurn         a churn soak, sampling the heap every 5 s
#
# About 25 minutes on 2 busy cores at full size. For a quick run:
#
#   SQLLOCK_SCALE_MAX=1000 SQLLOCK_SCALE_LOCKS=1000 SQLLOCK_SCALE_SOAK=15s bash scripts/bench-scale.sh
#
# SQLLOCK_SCALE_MAX bounds the lock table (default 1000000),
# SQLLOCK_SCALE_LOCKS the locks held for the memory figure (10000),
# SQLLOCK_SCALE_SOAK the soak's length per database (1m; 1h for the issue's
# soak). SCALE_OUT and SCALE_CHART name other output files.
set -euo pipefail
cd "$(dirname "$0")/.."
export SQLLOCK_SETUP_ONLY=1
source scripts/test.sh
mkdir -p bench
out=${SCALE_OUT:-bench/results-scale.txt}
chart=${SCALE_CHART:-bench/scale.svg}
{
	echo "# $(date -u +%FT%TZ) $(uname -m) $(nproc) cores, $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# SQLLOCK_SCALE_MAX=${SQLLOCK_SCALE_MAX:-1000000} SQLLOCK_SCALE_LOCKS=${SQLLOCK_SCALE_LOCKS:-10000} SQLLOCK_SCALE_SOAK=${SQLLOCK_SCALE_SOAK:-1m}"
	go test -run '^$' -bench '^BenchmarkScaleHeld$' -benchtime 1000x -timeout 1h .
	echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
	go test -run '^$' -bench '^BenchmarkScaleReaper$' -benchtime 1x -timeout 1h .
	echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
	go test -run '^$' -bench '^BenchmarkScaleClientMemory$' -benchtime 1x .
	go test -run '^$' -bench '^BenchmarkScaleChurn$' -benchtime 1x -timeout 3h .
	echo "# load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out"
go run ./internal/benchchart -scale < "$out" > "$chart"
echo "bench-scale.sh: wrote $out and $chart"
