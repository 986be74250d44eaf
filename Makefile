# The one test command is `make test` (see README.md).

.PHONY: test test-matrix test-ha test-tidb vet tidy fmt fuzz chaos soak soak-ledger soak-cron bench-peers bench-scale

# Finds or starts PostgreSQL and MariaDB, then runs go vet and
# go test -race -shuffle=on on every module's packages against both
# (scripts/test.sh).
test:
	bash scripts/test.sh

# What differs between PostgreSQL majors, on every supported major, 13 to
# 18 (each a pinned build downloaded once): the PostgreSQL dialect's
# conformance suite and the root package's strategy suites, without -race
# (make test runs the race detector, the chaos suite and everything else
# once). All six servers start at once; the runs go MATRIX_JOBS (4) at a
# time; about 5 minutes on 2 busy cores (scripts/test-matrix.sh). MAJORS="13 18" picks some.
test-matrix:
	bash scripts/test-matrix.sh

# Every module of the workspace (scripts/modules.sh): ./... alone stops at
# the nested modules (sqllockotel, cmd, examples).
vet:
	go vet $$(bash scripts/modules.sh)

# go mod tidy in every module (scripts/tidy.sh).
tidy:
	bash scripts/tidy.sh

# Fails listing the files that gofmt would change.
fmt:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

FUZZTIME ?= 10s

# Runs every fuzz target of every package for FUZZTIME each and fails if any
# found a failing input (scripts/fuzz.sh; FUZZFLAGS adds go test flags).
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# The history-checked chaos suite alone (make test runs it too), with its
# summary: every strategy x {PostgreSQL, MariaDB} x {no fault, killed
# connections, proxy faults, SIGSTOP, SIGKILL}. Add SQLLOCK_CHAOS_RESTART=1
# to restart the servers mid-run (needs the rights to).
chaos:
	bash scripts/test.sh -run '^TestChaos$$' -v ./tests/chaos/

# The long run: DURATION shared out among the scenarios.
DURATION ?= 30m
soak:
	SQLLOCK_CHAOS_SOAK=$(DURATION) bash scripts/test.sh -run '^TestChaos$$' -v -timeout 0 ./tests/chaos/

# The run ledger's chaos scenario (package ledger) for DURATION on each of
# PostgreSQL, MariaDB and SQLite, side by side; make test runs it for 30s.
soak-ledger:
	SQLLOCK_CHAOS_LEDGER=$(DURATION) bash scripts/test.sh -run '^TestChaosLedger$$' -v -timeout 0 ./tests/chaos/

# The distributed crontab's chaos scenario (five sqllock cron daemons of a
# 22-entry crontab, every daemon down for 25 s midway) for DURATION on
# PostgreSQL and MariaDB side by side; make test runs it for 5 minutes.
soak-cron:
	SQLLOCK_CHAOS_CRON=$(DURATION) bash scripts/test.sh -run '^TestChaosCron$$' -v -timeout 0 ./tests/chaos/

# The replicated test bed: a PostgreSQL primary + streaming standby of its
# own per scenario, the chaos workload across a forced failover, and a
# 3-node MariaDB Galera cluster (scripts/test-ha.sh; 3-4 minutes). Not
# part of make test; .ci/run runs it beside make test-matrix and make fuzz.
test-ha:
	bash scripts/test-ha.sh

# Opt-in, not part of test: builds tidb-server once from the Go module
# proxy (cached in ~/.cache/sqllock/tidb; the first build takes minutes and
# ~4 GB of Go caches), starts it on free loopback ports, and runs the TiDB
# dialect's conformance suite and the chaos suite's TiDB scenarios against
# it (scripts/test-tidb.sh).
test-tidb:
	bash scripts/test-tidb.sh

# sqllock against what users would pick instead, in one run (bench/peers):
# redsync and redislock on Redis, pg_advisory_lock and GET_LOCK, sqllock's
# lock table on PostgreSQL, MariaDB and SQLite; servers found or started
# (scripts/bench-peers.sh; about 15 minutes). Writes
# bench/results-peers.txt and bench/peers.svg. Not part of make test,
# which only builds and smoke-tests it.
bench-peers:
	bash scripts/bench-peers.sh

# The scale curves (issue 49): acquire+release beside 10 to 10^6 held
# leases, a reaper pass over 10^6 expired ones, the client's memory per held
# lock, a churn soak (scripts/bench-scale.sh; about 25 minutes; sizes and
# the soak's length from SQLLOCK_SCALE_MAX, SQLLOCK_SCALE_LOCKS and
# SQLLOCK_SCALE_SOAK). Writes bench/results-scale.txt and bench/scale.svg.
# Benchmarks only: nothing of it runs in make test.
bench-scale:
	bash scripts/bench-scale.sh
