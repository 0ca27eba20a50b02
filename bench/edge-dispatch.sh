#!/usr/bin/env bash
# Webhook publishing and delivery through the edge build against the
# native one (issue 23, point 2: what the delivery loop costs in the
# module). Each server in turn serves the demo store on CPU 0, one
# instance for the edge host, with one endpoint pointed at a local
# receiver (bench/yardstick, which answers 200 to anything); wrk on CPU 1
# publishes order.status.updated events for DURATION seconds over 8
# connections; then the script waits until the queue is empty and prints
# each server's events, deliveries and CPU per event (publish and
# delivery, the whole process: its user + system time over the run). A
# report, no target. Only 127.0.0.1 is loaded.
#
# Environment: DURATION (5), PORT (18190), RECEIVER_PORT (18191), KEEP (a
# directory for the binaries and logs, kept).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
PORT=${PORT:-18190}
RECEIVER_PORT=${RECEIVER_PORT:-18191}
STORE=7c9e6679-7425-40de-944b-e07fc1f90ae7
KEY=ak_demo_not_secret_do_not_deploy
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
for p in "$PORT" "$RECEIVER_PORT"; do
  if curl -s -o /dev/null "http://127.0.0.1:$p/"; then
    echo "port $p is already in use; set PORT / RECEIVER_PORT" >&2
    exit 2
  fi
done

go build -o "$work/deeplink" .
go build -o "$work/edgehost" ./wasm
go build -o "$work/yardstick" ./bench/yardstick
GOOS=wasip1 GOARCH=wasm go build -tags nethttpomithttp2 -buildmode=c-shared -trimpath -ldflags=-s -o "$work/service.wasm" .
# The demo configuration, with the per-key budget past any load here.
sed '0,/{/s//{"fairness": {"key_rate": 1000000000, "key_burst": 1000000000}, /' demo.json >"$work/config.json"
cat >"$work/events.lua" <<EOF
wrk.method = "POST"
wrk.headers["X-API-Key"] = "$KEY"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"type":"order.status.updated","data":{"object":{"id":"o1","status":"completed"}}}'
EOF

taskset -c 1 "$work/yardstick" -addr "127.0.0.1:$RECEIVER_PORT" 2>/dev/null &
pids+=($!)

metric() { # metric NAME: the sum of NAME's series in the server's /metrics
  curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" {s += $2} END {print s + 0}'
}

measure() { # measure native|edge
  local pid cpu0 cpu1 events delivered hz
  rm -rf "$work/data-$1"
  if [ "$1" = native ]; then
    taskset -c 0 "$work/deeplink" -config "$work/config.json" -addr "127.0.0.1:$PORT" -data "$work/data-$1" >/dev/null 2>"$work/$1.err" &
  else
    # The first launch compiles the module (seconds): the cache is kept
    # in the work directory.
    taskset -c 0 "$work/edgehost" -config "$work/config.json" -module "$work/service.wasm" -cache "$work/cache" \
      -addr "127.0.0.1:$PORT" -data "$work/data-$1" -instances 1 >/dev/null 2>"$work/$1.err" &
  fi
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 1200); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/readyz" && break
    sleep 0.1
  done
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/stores/$STORE/webhooks" -H "X-API-Key: $KEY" \
    -H 'Content-Type: application/json' \
    -d '{"url":"http://127.0.0.1:'"$RECEIVER_PORT"'/hook","events":["order.status.updated"]}'
  cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  events=$(taskset -c 1 wrk -t1 -c8 -d"${DURATION}s" -s "$work/events.lua" "http://127.0.0.1:$PORT/stores/$STORE/events" |
    awk '/requests in/ {print $1}')
  for _ in $(seq 1 1200); do # the queue drained, within two minutes
    [ "$(metric deeplink_webhook_queue_depth)" = 0 ] && break
    sleep 0.1
  done
  cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  delivered=$(metric deeplink_webhook_deliveries_total)
  hz=$(getconf CLK_TCK)
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  awk -v n="$events" -v d="$delivered" -v t="$((cpu1 - cpu0))" -v hz="$hz" -v s="$1" \
    'BEGIN {printf "%-6s events %d, deliveries %d, CPU %.0f us an event\n", s, n, d, t / hz / n * 1e6}'
}

measure native
measure edge
