# The one test command is `make test` (see README.md).

.PHONY: test vet fmt fuzz

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
