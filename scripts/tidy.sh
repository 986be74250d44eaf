#!/usr/bin/env bash
# scripts/tidy.sh: go mod tidy in every module of the repository (`make
# tidy` runs it). With -diff, changes nothing and fails, printing the
# changes, if a go.mod or go.sum is not tidy (scripts/test.sh checks so):
# a module that imports a package its go.mod does not provide (say the
# core's tests importing sqllockotel, which go.work would let build) fails
# there.
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
tidy=(go mod tidy)
case ${1:-} in
"") ;;
-diff) tidy+=(-diff) ;;
*)
	echo "usage: scripts/tidy.sh [-diff]" >&2
	exit 2
	;;
esac

# modules: the directory of every module of the workspace, the core first.
mapfile -t modules < <(GOWORK= go list -m -f '{{.Dir}}')

failed=0
for dir in "${modules[@]}"; do
	rel=$(realpath --relative-to=. "$dir")
	(
		cd "$dir"
		drop=()
		if [ "$rel" != . ]; then
			# Every module of this tree that this one requires.
			for req in $(go mod edit -json | grep -o "\"Path\": \"$core[^\"]*\"" | cut -d'"' -f4 | sort -u); do
				sub=${req#"$core"}
				go mod edit -replace="$req=$(realpath --relative-to=. "$OLDPWD/${sub#/}")"
				drop+=("-dropreplace=$req")
			done
		fi
		echo "tidy.sh: ${tidy[*]} in $rel" >&2
		status=0
		"${tidy[@]}" || status=$?
		[ ${#drop[@]} -eq 0 ] || go mod edit "${drop[@]}"
		exit "$status"
	) || failed=1
done
exit "$failed"
