#!/usr/bin/env bash
# Runs every check CI runs: formatting, vet, the tests with the race
# detector. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
go test -race -count=1 ./...
