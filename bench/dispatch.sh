#!/usr/bin/env bash
# Embedded dispatch measured from outside (issue 33): webhooks published
# over HTTP and delivered, against a yardstick, each a process of its own.
#
# The service is the real binary on a configuration of its own in a
# temporary directory (the demo store, storage.durability "fsync", one
# endpoint at the receiver; allow_insecure_urls, as the demo has it, for a
# receiver on 127.0.0.1). The yardstick is bench/yardstick -dispatch: it
# accepts one POST of an event and sends one signed POST of it to the
# receiver, nothing kept. The receiver (bench/dispatchload -serve) answers
# 200 and counts deliveries by webhook-id, in a process of its own that
# neither side is charged for. The load (bench/dispatchload) publishes
# EVENTS events from CONNECTIONS publishers at once and waits until the
# receiver has counted each event's delivery. Each side in turn, A/B/A/B
# (ROUNDS), after an unmeasured warm-up of each. It prints each run's
# deliveries a second (events over the time from the first publish to the
# last delivery) and each server's CPU per delivery (user + system from
# /proc/PID/stat over the run), and the ratio of the mean rates,
# service/yardstick. Only 127.0.0.1 is loaded, and every run is bounded
# (the receiver waits 2 minutes at most).
#
# Target (issue 33): ratio >= 0.6. Exit 1 when missed or a run failed, 2 on
# a setup failure.
#
# Environment (all optional):
#   EVENTS        events per run                 (10000)
#   CONNECTIONS   publishers at once             (64)
#   ROUNDS        A/B rounds                     (2)
#   WARM          events of each warm-up         (2000)
#   PORT          service port                   (18280)
#   YARD_PORT     yardstick port                 (18281)
#   RECEIVER_PORT the receiver's port            (18282)
#   PIN           1: both servers on CPU 0, the load and receiver on CPU 1
#   KEEP          directory for binaries and logs (a temporary one, removed)
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-10000}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-2}
WARM=${WARM:-2000}
PORT=${PORT:-18280}
YARD_PORT=${YARD_PORT:-18281}
RECEIVER_PORT=${RECEIVER_PORT:-18282}
for v in EVENTS CONNECTIONS ROUNDS WARM; do
  case ${!v} in ""|*[!0-9]*|0) echo "$v is a whole number of at least 1" >&2; exit 2 ;; esac
done
srv_pin=() load_pin=()
if [ "${PIN:-}" = 1 ]; then
  command -v taskset >/dev/null || { echo "PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  srv_pin=(taskset -c 0) load_pin=(taskset -c 1)
fi
STORE=7c9e6679-7425-40de-944b-e07fc1f90ae7
KEY=ak_demo_not_secret_do_not_deploy
command -v curl >/dev/null || (apt-get update && apt-get install -y curl)

if [ -n "${KEEP:-}" ]; then
  work=$KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
fi
svc_pid= yard_pid= recv_pid=
cleanup() {
  set +e
  for pid in $svc_pid $yard_pid $recv_pid; do
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -z "${KEEP:-}" ]; then rm -rf "$work"; fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in "$PORT" "$YARD_PORT" "$RECEIVER_PORT"; do
  if curl -s -o /dev/null "http://127.0.0.1:$p/"; then
    echo "port $p is already in use; set PORT / YARD_PORT / RECEIVER_PORT" >&2
    exit 2
  fi
done

echo "building into $work"
go build -o "$work/deeplink" .
go build -o "$work/yardstick" ./bench/yardstick
go build -o "$work/dispatchload" ./bench/dispatchload

# The demo configuration, durability fsync said outright, and the
# per-key request budget past any load here (or it would measure 429s).
sed '0,/{/s//{"fairness": {"key_rate": 1000000000, "key_burst": 1000000000}, "storage": {"durability": "fsync"}, /' \
  demo.json >"$work/config.json"

"${load_pin[@]}" "$work/dispatchload" -serve "127.0.0.1:$RECEIVER_PORT" 2>"$work/receiver.err" &
recv_pid=$!
"${srv_pin[@]}" "$work/deeplink" -config "$work/config.json" -addr "127.0.0.1:$PORT" -data "$work/data" \
  >"$work/service.out" 2>"$work/service.err" &
svc_pid=$!
"${srv_pin[@]}" "$work/yardstick" -addr "127.0.0.1:$YARD_PORT" -dispatch "http://127.0.0.1:$RECEIVER_PORT/hook" \
  2>"$work/yardstick.err" &
yard_pid=$!

wait_ready() { # url name
  for _ in $(seq 1 300); do
    if curl -s -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not come up at $1" >&2
  exit 2
}
wait_ready "http://127.0.0.1:$PORT/readyz" service
wait_ready "http://127.0.0.1:$YARD_PORT/" yardstick
wait_ready "http://127.0.0.1:$RECEIVER_PORT/count" receiver

code=$(curl -s -o "$work/endpoint.json" -w '%{http_code}' "http://127.0.0.1:$PORT/stores/$STORE/webhooks" \
  -H "X-API-Key: $KEY" -H 'Content-Type: application/json' \
  -d '{"url":"http://127.0.0.1:'"$RECEIVER_PORT"'/hook","events":["order.status.updated"]}')
if [ "$code" != 201 ]; then
  echo "creating the endpoint answered $code: $(cat "$work/endpoint.json")" >&2
  exit 2
fi

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # name port events -> "rate cpu_us" on stdout
  local pid=$svc_pid out t0 t1
  [ "$2" = "$PORT" ] || pid=$yard_pid
  t0=$(cpu_ticks "$pid")
  if ! out=$("${load_pin[@]}" "$work/dispatchload" -url "http://127.0.0.1:$2/stores/$STORE/events" -key "$KEY" \
    -receiver "http://127.0.0.1:$RECEIVER_PORT" -n "$3" -c "$CONNECTIONS" 2>&1); then
    echo "run $1 failed: $out" >&2
    return 1
  fi
  t1=$(cpu_ticks "$pid")
  awk -v out="$out" -v t="$((t1 - t0))" -v hz="$hz" 'BEGIN {
    split(out, f, " "); n = f[2]; printf "%.1f %.1f\n", n / f[6], t / hz * 1e6 / n }'
}

run warm-service "$PORT" "$WARM" >/dev/null
run warm-yardstick "$YARD_PORT" "$WARM" >/dev/null

declare -a svc_rate yard_rate svc_cpu yard_cpu
for round in $(seq 1 "$ROUNDS"); do
  order=(service yardstick)
  if [ $((round % 2)) = 0 ]; then order=(yardstick service); fi # who goes first alternates
  for who in "${order[@]}"; do
    port=$PORT
    [ "$who" = service ] || port=$YARD_PORT
    read -r rate cpu < <(run "$who-$round" "$port" "$EVENTS") || exit 1
    [ -n "${rate:-}" ] || exit 1
    printf '%-9s run %d: %8.1f deliveries/s  %7.1f us CPU/delivery\n' "$who" "$round" "$rate" "$cpu"
    if [ "$who" = service ]; then svc_rate+=("$rate"); svc_cpu+=("$cpu"); else yard_rate+=("$rate"); yard_cpu+=("$cpu"); fi
  done
done

join() { local IFS=' '; echo "$*"; }
awk -v S="$(join "${svc_rate[@]}")" -v Y="$(join "${yard_rate[@]}")" \
    -v SC="$(join "${svc_cpu[@]}")" -v YC="$(join "${yard_cpu[@]}")" \
    -v e="$EVENTS" -v c="$CONNECTIONS" '
function mean(a, n,   i, t) { for (i = 1; i <= n; i++) t += a[i]; return t / n }
BEGIN {
  n = split(S, s); split(Y, y); split(SC, sc); split(YC, yc)
  r = mean(s, n) / mean(y, n)
  printf "\nsummary (%d events a run, %d publishers, A/B x %d)\n", e, c, n
  printf "  service   deliveries/s: mean %.1f; CPU per delivery %.1f us\n", mean(s, n), mean(sc, n)
  printf "  yardstick deliveries/s: mean %.1f; CPU per delivery %.1f us\n", mean(y, n), mean(yc, n)
  printf "  ratio service/yardstick: %.3f  (target >= 0.6)\n", r
  ok = r >= 0.6
  printf "  %s\n", ok ? "PASS" : "FAIL"
  exit ok ? 0 : 1
}'
