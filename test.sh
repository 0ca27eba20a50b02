#!/usr/bin/env bash
# Runs the project's checks. Two modes:
#
#   ./test.sh        the quick run (a few minutes): formatting, and every
#                    test once without the race detector (with go test's own
#                    vet checks): the contract suite against the native
#                    binary, the browser walks, the crash test, the Redis
#                    backend's tests and the replicas on it, promtool's check
#                    of a /metrics scrape, the merchants' snippets and the
#                    game-side examples; built without the checks against
#                    openapi.json (tag noopenapi), whose validator takes
#                    minutes to compile in a first build.
#   ./test.sh full   what CI runs (.ci/run): formatting and vet (native and
#                    wasip1), Redocly's lint of openapi.json, the contract
#                    suite held to openapi.json on the native binary, every
#                    test with the race detector, the contract and crash
#                    tests against the edge module under the wazero host, the
#                    contract tests with the state on Redis, and a minute of
#                    fuzzing.
#
# Installs what the tests need and the machine lacks (php, node and python3
# with Flask and Express for the merchants' snippets, promtool, chromium
# for the browser tests, redis-server, and for full a C compiler for the
# race detector; npm from its registry), then says what it runs as each
# step starts, and each step's time when it ends. Steps that do not depend
# on each other run side by side, two at a time at most (the machines
# have two cores).
# Exits non-zero when a step fails, with that step's output.
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-quick}
case $mode in
  quick | full) ;;
  *) echo "usage: ./test.sh [full]" >&2; exit 2 ;;
esac

# Go builds without cgo, as the release binary is built, but for the race
# detector, which needs it: so the build is the same whether or not the
# machine had a C compiler when it began.
export CGO_ENABLED=0

# The Debian packages of the tools that are missing, in one apt-get: no
# recommended packages, and dpkg without its fsync per file (a test
# machine's packages can be installed again), which on a new machine takes
# the installs from minutes to about a minute.
missing=()
want() { command -v "$1" >/dev/null || missing+=("$2"); } # want CMD DEBIAN-PACKAGE
want promtool prometheus
want php php-cli
want node nodejs
want python3 python3
want chromium chromium # the browser tests of the dashboard and the demo
want redis-server redis-server
# The merchants' guide's handlers run whole in their frameworks
# (TestMerchantDocHandlers): Flask from Debian, Express from npm.
{ command -v python3 >/dev/null && python3 -c "import flask" 2>/dev/null; } || missing+=(python3-flask)
if [ "$mode" = full ]; then # the race detector needs cgo, so a C compiler
  want gcc gcc
  [ -e /usr/include/stdlib.h ] || missing+=(libc6-dev)
fi
if ((${#missing[@]})); then
  # A new machine's first build compiles everything: it starts now, beside
  # the installs, which mostly wait for the network and the disk, and the
  # tests reuse what it compiled (go list -export compiles, and no more).
  go list -export -deps -test -tags noopenapi ./... >/dev/null 2>&1 &
  early_build=$!
  echo "installing ${missing[*]} for the tests"
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive # CI has no terminal to answer prompts
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}" >/dev/null
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}
# npm, where the machine has none, from npm's registry: Debian's npm
# package brings some 300 packages of its own and takes minutes to install.
if ! command -v npm >/dev/null; then
  npm_dir=$cache/deeplink-test-npm
  if [ ! -x "$npm_dir/bin/npm" ]; then
    echo "installing npm 10.9.3 for the tests"
    rm -rf "$npm_dir" && mkdir -p "$npm_dir/bin"
    node -e '
      const get = (u) => require("https").get(u, (r) => {
        if (r.statusCode >= 300 && r.headers.location) return get(r.headers.location);
        if (r.statusCode !== 200) { console.error(u + ": " + r.statusCode); process.exit(1); }
        r.pipe(process.stdout);
      }).on("error", (e) => { console.error(e.message); process.exit(1); });
      get("https://registry.npmjs.org/npm/-/npm-10.9.3.tgz");' | tar -xz -C "$npm_dir"
    for tool in npm npx; do
      printf '#!/bin/sh\nexec node "%s/package/bin/%s-cli.js" "$@"\n' "$npm_dir" "$tool" >"$npm_dir/bin/$tool"
      chmod +x "$npm_dir/bin/$tool"
    done
  fi
  export PATH=$npm_dir/bin:$PATH
fi
express_dir=$cache/deeplink-test-express
if [ ! -d "$express_dir/node_modules/express" ]; then
  echo "installing express for the tests"
  npm install --silent --no-audit --no-fund --prefix "$express_dir" express@5.1.0 >/dev/null
fi
export NODE_PATH="$express_dir/node_modules"
[ -z "${early_build:-}" ] || wait "$early_build" || true # a failure shows in the tests

# Every tool is installed now: a test that finds one missing fails rather
# than skips, as it would under a plain go test.
export DEEPLINK_TEST_TOOLS=require

t0=${EPOCHREALTIME//[.,]/} # microseconds (the decimal point is the locale's)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# killtree PID: ends PID and every process under it, the deepest first.
killtree() {
  local child
  for child in $(pgrep -P "$1"); do killtree "$child"; done
  kill "$1" 2>/dev/null || true
}
# On an interrupt, the steps running in the background end too (they
# ignore SIGINT, as a script's background jobs do), tests and all.
trap 'trap - INT TERM; for job in $(jobs -p); do killtree "$job"; done; wait; exit 130' INT TERM

secs() { # secs START-MICROSECONDS: the time since then, as 12.3s
  local us=$(( ${EPOCHREALTIME//[.,]/} - $1 ))
  printf '%d.%ds' $(( us / 1000000 )) $(( us / 100000 % 10 ))
}

say() { printf '[%7s] %s\n' "$(secs "$t0")" "$*"; }

# step NAME CMD...: runs CMD, saying when it starts and, every 30 s, that
# it still runs; when it ends, its time and its output, all at once so
# that steps running side by side do not mix their lines. A
# failing step prints FAILED and returns its exit code. A subshell, so
# that its variables stay its own.
step() (
  name=$1; shift
  out=$(mktemp "$logs/step.XXXXXX")
  start=${EPOCHREALTIME//[.,]/}
  say "start  $name"
  "$@" >"$out" 2>&1 &
  pid=$!
  next=30 # seconds: when to say next that it still runs
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    if (( ${EPOCHREALTIME//[.,]/} - start >= next * 1000000 )) && kill -0 "$pid" 2>/dev/null; then
      say "...    $name: ${next}s so far"
      next=$((next + 30))
    fi
  done
  rc=0
  wait "$pid" || rc=$?
  if (( rc == 0 )); then
    msg=$(say "ok     $name ($(secs "$start"))")
  else
    msg=$(say "FAILED $name ($(secs "$start"), exit $rc); its output:")
  fi
  printf '%s\n%s' "$msg" "$(cat "$out")"
  if [ -s "$out" ]; then echo; fi
  return "$rc"
)

# lanes: runs each argument, a function name, as a background lane, waits
# for all of them, and fails if any failed.
lanes() {
  local pids=() failed=0
  for lane in "$@"; do "$lane" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return "$failed"
}

gofmt_check() {
  local unformatted
  unformatted=$(gofmt -l .)
  if [ -n "$unformatted" ]; then
    echo "gofmt would change:"; echo "$unformatted"; return 1
  fi
}

# full's two lanes run side by side from the start, with no step waiting
# for the other lane: the race detector's build (its own compile of
# everything) beside the native one that go vet starts and the later
# steps reuse. Fuzzing ends the race lane, which is the shorter of the
# two without it (on a new machine: 540 s against 645).
race() {
  step "gofmt -l ." gofmt_check &&
  step "go vet (GOOS=wasip1)" env GOOS=wasip1 GOARCH=wasm go vet . ./internal/... &&
  step "go test -race ./..." env CGO_ENABLED=1 go test -race -count=1 ./... &&
  step "fuzzing, about a minute in all" fuzz_briefly
}
rest() {
  step "go vet ./..." go vet ./... &&
  # The API's OpenAPI document (openapi.json) under Redocly's recommended
  # rules, each an error (redocly.yaml; .redocly.lint-ignore.yaml says
  # where a rule does not fit and why).
  step "redocly lint openapi.json" lint_openapi &&
  # The race lane's builds leave out the checks against openapi.json (see
  # contract_openapi_off_test.go); this one makes them, on the native binary.
  step "contract tests and the OpenAPI checks (race detector off)" go test -count=1 -run 'TestContract$|TestOpenAPI' . &&
  step "contract and crash tests against the edge module (wasm)" go test -count=1 -run 'TestContract|TestCrash' . -args -target=wasm &&
  step "contract tests with the state on Redis" env DEEPLINK_STORAGE=redis go test -count=1 -run 'TestContract$' .
}

# lint_openapi lints openapi.json. The linter's version is pinned:
# 1.34.20 runs on Debian's Node.js 18 (2.x needs 20.19 or later), and once
# npm has it in its cache the step needs no network.
lint_openapi() {
  npm_config_prefer_offline=true npx --yes @redocly/cli@1.34.20 lint openapi.json
}

# fuzz_briefly explores a little at every run: the crash target (a torn
# journal), the store's records, the JSON bodies (alone, through the
# register handler, and the publish's validation), the configuration and
# the frames the edge module sends its host.
fuzz_briefly() {
  fuzz_for 20s FuzzCrash ./internal/store/embedded &&
  fuzz_for 10s FuzzRecord ./internal/store/embedded &&
  fuzz_for 10s FuzzDecodeObject . &&
  fuzz_for 10s FuzzRegisterBody . &&
  fuzz_for 10s FuzzValidateEvent . &&
  fuzz_for 10s FuzzParse ./internal/config &&
  fuzz_for 5s FuzzServe ./internal/store/hoststore
}

# fuzz_for fuzzes target in pkg for a while, built without the browser
# tests (tag nobrowser), as the fuzzer instruments every package the test
# binary links, chromedp's too. Go 1.26's fuzzing engine may end a run
# that found nothing with a bare "context deadline exceeded" when its time
# is up while a worker is busy (go.dev/issue/75804, fixed in Go 1.27):
# such a run passes with a note. A real finding always writes its input to
# testdata and says so, and fails.
fuzz_for() { # duration target pkg
  local out
  if out=$(go test -tags noopenapi,nobrowser -run '^$' -fuzz "^$2\$" -fuzztime "$1" "$3" 2>&1); then
    printf '%s\n' "$out"
    return 0
  fi
  printf '%s\n' "$out"
  if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
    echo "($2: the fuzzing engine's end-of-time race, go.dev/issue/75804; nothing found)"
    return 0
  fi
  return 1
}

# The game side's TypeScript example (examples/game/node): TestGameExample
# compiles it with the tsc of its package-lock, which this installs.
game_node_deps() { npm ci --prefix examples/game/node --no-audit --no-fund; }
step "npm ci in examples/game/node" game_node_deps

# The quick run builds without the OpenAPI checks (tag noopenapi): their
# validator's dependencies take minutes to compile in a first build.
quick_tests() { step "go test -tags noopenapi ./..." go test -tags noopenapi -count=1 ./...; }

if [ "$mode" = quick ]; then
  # go test runs the high-confidence part of go vet on every package it
  # builds; the whole vet, which compiles everything once more, is full's.
  step "gofmt -l ." gofmt_check && quick_tests
  say "all checks of the quick run passed in $(secs "$t0")"
  say "not run here: the whole go vet (native and wasip1), openapi.json's lint and the checks against it, the race detector, the edge module's contract and crash tests, the contract tests on Redis, fuzzing: ./test.sh full runs them (as CI does)"
  exit 0
fi
lanes race rest
say "all checks passed in $(secs "$t0")"
