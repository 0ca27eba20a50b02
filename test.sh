#!/usr/bin/env bash
# Runs every check CI runs: formatting, vet (native and wasip1), the tests
# with the race detector (the contract tests among them, against the native
# binary), the allocation tests that need it off, and the contract tests
# against the edge module under the wazero host, and the native contract tests
# again with the state on Redis.
# Installs what the tests need (php for the merchants' PHP snippet, chromium for
# the browser tests, redis-server for the Redis store's).
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")"

need() { # need CMD DEBIAN-PACKAGE
  command -v "$1" >/dev/null && return
  echo "installing $2 for the tests"
  export DEBIAN_FRONTEND=noninteractive # CI has no terminal to answer prompts
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq "$2" >/dev/null; fi
}
need php php-cli
need node nodejs
need python3 python3
need chromium chromium # the browser tests of the dashboard and the demo
need redis-server redis-server

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
GOOS=wasip1 GOARCH=wasm go vet .
go test -race -count=1 ./...
go test -count=1 -run 'Allocations' .
go test -count=1 -run 'TestContract' . -args -target=wasm
DEEPLINK_STORAGE=redis go test -count=1 -run 'TestContract$' . # the native cases with the state on Redis
