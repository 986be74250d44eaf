#!/usr/bin/env bash
# Runs the benchmarks behind BENCHMARKS.md against the local servers (found
# or started as by scripts/test.sh), writes the raw output to
# bench/results.txt and the chart to bench/chart.svg.
#
#   bash scripts/bench.sh          # about 30 minutes on 2 cores
#
# and then scripts/bench-peers.sh (make bench-peers), the comparison with
# redsync, redislock and the databases' own locks.
set -euo pipefail
cd "$(dirname "$0")/.."
export SQLLOCK_SETUP_ONLY=1
source scripts/test.sh
mkdir -p bench
out=bench/results.txt
{
	echo "# $(date -u +%FT%TZ) $(uname -m) $(nproc) cores, $(go version | cut -d' ' -f3)"
	# sqllockotel's BenchmarkTryAcquireRelease: the core's, with the
	# OpenTelemetry-observed lockers timed in the same run.
	go test -run '^$' -bench '^BenchmarkTryAcquireRelease$' -benchtime 5000x -count 3 ./sqllockotel/
	go test -run '^$' -bench '^BenchmarkOptimisticTryAcquireRelease$' -benchtime 3000x -count 3 .
	go test -run '^$' -bench '^BenchmarkPessimisticTryAcquireRelease$' -benchtime 3000x -count 3 .
	go test -run '^$' -bench '^BenchmarkOptimisticUpdate$' -benchtime 3000x .
	go test -run '^$' -bench '^BenchmarkPessimisticHandoff$' -benchtime 300x .
	go test -run '^$' -bench '^BenchmarkHandoff$/.*/hold=0s' -benchtime 300x .
	go test -run '^$' -bench '^BenchmarkHandoff$/.*/hold=1s' -benchtime 30x .
	go test -run '^$' -bench '^BenchmarkIdleWaiters$' -benchtime 30x .
	go test -run '^$' -bench '^BenchmarkRenewal$' -benchtime 5x .
	go test -run '^$' -bench '^BenchmarkReaper$' -benchtime 1x -timeout 30m .
	go test -run '^$' -bench '^BenchmarkInstrumentation$' -benchtime 40000x -count 3 ./sqllockotel/
	go test -run '^$' -bench 'HandoffThroughPgBouncer/.*/.*/hold=1s' -benchtime 30x .
	go test -run '^$' -bench 'TryAcquireReleaseThroughPgBouncer' -benchtime 2000x .
} | tee "$out"
go run ./internal/benchchart < "$out" > bench/chart.svg
echo "bench.sh: wrote $out and bench/chart.svg"
# The same-run comparison with redsync, redislock and the databases' own
# locks, on servers of its own (bench/results-peers.txt, bench/peers.svg).
bash scripts/bench-peers.sh
