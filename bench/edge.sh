#!/usr/bin/env bash
# The edge build's figures (issue 4): module size, first response after a
# launch with a warm compilation cache, host CPU while idle, then the
# register throughput against the native build (bench/run.sh MODE=edge).
# Targets: first response <= 1 s, idle CPU <= 1 % of a core, ratio >= 0.5.
#
# Environment: PORT (18180), IDLE (seconds of idle measured, 10),
# EDGE_FLAGS (extra host flags), DURATION/CONNECTIONS for the load part.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-18180}
IDLE=${IDLE:-10}
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then
  echo "port $PORT is already in use; set PORT" >&2
  exit 2
fi
GOOS=wasip1 GOARCH=wasm go build -tags nethttpomithttp2 -buildmode=c-shared -trimpath -ldflags=-s -o "$work/service.wasm" .
go build -o "$work/edgehost" ./wasm
size=$(stat -c %s "$work/service.wasm")

launch() { # starts the host; sets pid, and elapsed to the seconds to the first /readyz 200
  local t0 t1
  t0=$(date +%s.%N)
  "$work/edgehost" ${EDGE_FLAGS:-} -module "$work/service.wasm" -cache "$work/cache" \
    -addr "127.0.0.1:$PORT" -data "$work/data" >"$work/out" 2>"$work/err" &
  pid=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$PORT/readyz"; do
    kill -0 "$pid" 2>/dev/null || { echo "host exited:" >&2; cat "$work/err" >&2; exit 2; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }

launch; cold=$elapsed; stop     # fills the compilation cache
launch; warm=$elapsed           # the figure: a launch with a warm cache
hz=$(getconf CLK_TCK)
sleep 2                          # the workers start once the first instance serves
cpu() { # the host's CPU ticks and its watchdog's
  local p sum=0
  for p in "$pid" $(pgrep -P "$pid"); do
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$sum"
}
t0=$(cpu)
sleep "$IDLE"                    # idle on purpose: this is what is measured
t1=$(cpu)
stop
idle=$(awk -v t="$((t1 - t0))" -v hz="$hz" -v s="$IDLE" 'BEGIN {printf "%.2f", t / hz / s * 100}')

printf 'edge module: %s bytes (%.1f MiB)\n' "$size" "$(awk -v s="$size" 'BEGIN {print s / 1048576}')"
printf 'first response after launch: %s s with a cold cache, %s s warm (target <= 1 s)\n' "$cold" "$warm"
printf 'host CPU while idle (its watchdog included): %s %% of a core over %s s (target <= 1 %%)\n' "$idle" "$IDLE"
ok=$(awk -v w="$warm" -v i="$idle" 'BEGIN {print (w <= 1 && i <= 1) ? 1 : 0}')
MODE=edge bench/run.sh || ok=0
[ "$ok" = 1 ]
