# The one test command is `make test` (see README.md).

.PHONY: test vet fmt fuzz chaos soak

# Finds or starts PostgreSQL and MariaDB, then runs go vet and
# go test -race -shuffle=on ./... against both (scripts/test.sh).
test:
	bash scripts/test.sh

vet:
	go vet ./...

# Fails listing the files that gofmt would change.
fmt:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

fuzz:
	go test -run='^$$' -fuzz=FuzzValidateName -fuzztime=20s .

# The history-checked chaos suite alone (make test runs it too), with its
# summary: every strategy x {PostgreSQL, MariaDB} x {no fault, killed
# connections, proxy faults, SIGSTOP, SIGKILL}. Add SQLLOCK_CHAOS_RESTART=1
# to restart the servers mid-run (needs the rights to).
chaos:
	bash scripts/test.sh -run '^TestChaos$$' -v ./internal/chaos/

# The long run: DURATION shared out among the scenarios.
DURATION ?= 30m
soak:
	SQLLOCK_CHAOS_SOAK=$(DURATION) bash scripts/test.sh -run '^TestChaos$$' -v -timeout 0 ./internal/chaos/
