#!/usr/bin/env bash
# scripts/modules.sh: prints a package pattern per module of the workspace
# (go.work), one a line: ./... for the core module, ./DIR/... for each
# module beside it (sqllockotel, cmd, examples). ./... alone stops where a
# nested module's go.mod begins, so the scripts and the Makefile run go
# vet, go test and go list on these patterns to reach every module. With
# the workspace off (GOWORK=off), the core's ./... alone.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(go env GOWORK)
if [ -z "$work" ] || [ "$work" = off ]; then
	echo ./...
	exit 0
fi
root=$(dirname "$work")
go list -m -f '{{.Dir}}' | while read -r dir; do
	echo ".${dir#"$root"}/..."
done
