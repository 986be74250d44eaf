#!/usr/bin/env bash
# scripts/tidy.sh: go mod tidy in every module of the repository (`make
# tidy` runs it).
#
# The modules besides the core (sqllockotel, cmd, examples) require the
# core, and examples sqllockotel, at the version they will be released
# with. go.work points the go command at this tree's copies for building
# and testing, but go mod tidy ignores go.work and would look those
# versions up on the module proxy, where an unreleased one is not. So each
# module is tidied with a replace of this tree's modules for the time of
# the tidy, and the replace is dropped again: no go.mod keeps a replace
# (go install MODULE@VERSION refuses a module that has one).
set -euo pipefail
cd "$(dirname "$0")/.."

export GOWORK=off
core=github.com/sqllock/sqllock

# modules: the directory of every module of the workspace, the core first.
mapfile -t modules < <(GOWORK= go list -m -f '{{.Dir}}')

for dir in "${modules[@]}"; do
	rel=${dir#"$PWD"}
	rel=${rel#/}
	(
		cd "$dir"
		drop=()
		if [ -n "$rel" ]; then
			# Every module of this tree that this one requires.
			for req in $(go mod edit -json | grep -o "\"Path\": \"$core[^\"]*\"" | cut -d'"' -f4 | sort -u); do
				sub=${req#"$core"}
				go mod edit -replace="$req=$(realpath --relative-to=. "$OLDPWD/${sub#/}")"
				drop+=("-dropreplace=$req")
			done
		fi
		echo "tidy.sh: go mod tidy in ./$rel" >&2
		status=0
		go mod tidy || status=$?
		[ ${#drop[@]} -eq 0 ] || go mod edit "${drop[@]}"
		exit "$status"
	)
done
