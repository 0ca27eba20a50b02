#!/usr/bin/env bash
# Load test of POST /stores/{id}/auth/auth-code against a yardstick.
#
# The host is small and shared, so absolute req/s mean little. The script
# runs wrk against the service and against bench/yardstick (bare net/http
# giving the same answer) alternately, A/B/A/B (ROUNDS of A/B), and reports
# the service's throughput as a ratio to the yardstick's. Only 127.0.0.1 is
# loaded, for a bounded time.
#
# Targets: with DURABILITY=fsync (the service's default) ratio >= 0.6 and
# service p99 < 10 ms at 32 connections; with DURABILITY=interval ratio
# >= 0.75. Exit 1 when one is missed, 2 on a setup failure.
#
# MODE=edge compares the edge build instead (the wasm module under its
# wazero host, wasm/) with the native build, same load: target ratio >= 0.5.
#
# MODE=redis compares the service with its state on Redis (a redis-server
# the script starts, appendonly yes, appendfsync APPENDFSYNC) with the
# service on the embedded store in "fsync" durability, same load: target
# ratio >= 0.5 (issue 22). Redis's CPU counts in the service's CPU/req.
# With REPLICAS=2, side A is two replicas on that Redis, wrk split over
# them (two wrk at once, half the connections each; their figures summed).
#
# MODE=spin calibrates the ratio: it compares the yardstick made to burn
# SPIN of CPU on each request (yardstick -spin) with the plain yardstick.
# The ratio it prints is what a service costing SPIN more per request than
# a bare server would get here, wrk's share of the cores included.
#
# Environment (all optional):
#   DURATION     seconds per wrk run              (10)
#   CONNECTIONS  wrk connections                  (32)
#   THREADS      wrk threads                      (1: one thread drives
#                32 connections past 70 k/s here, and takes at most one of
#                the two cores; with two, four threads took turns on them
#                and even the yardstick's p99 rose from 5.1-5.7 to 6.4-7.7 ms)
#   ROUNDS       A/B rounds; the ratio is of the means, and with more
#                than two each round's own ratio is printed too, and the
#                service's cap on live entries is raised to hold them all (2)
#   PORT         service port                     (18080)
#   YARD_PORT    yardstick port                   (18081)
#   KEEP         directory for binaries and wrk logs (a temporary one, removed)
#   MODE         yardstick (default), edge, redis or spin
#   APPENDFSYNC  Redis's appendfsync (MODE=redis): always (default: as
#                durable as "fsync") or everysec
#   REDIS_PORT   the Redis port (MODE=redis)      (18082)
#   REPLICAS     1 or 2 replicas on Redis (MODE=redis) (1); the second
#                listens on REDIS_PORT+1
#   DURABILITY   the service's storage.durability (MODE=yardstick): fsync
#                (default) or interval
#   SPIN         the CPU the spun yardstick adds to a request (MODE=spin), e.g. 3us
#   EDGE_FLAGS   extra flags of the edge host (MODE=edge), e.g. -call-timeout 0
#   CODE_TTL     the service's auth_code_ttl (MODE=yardstick), e.g. 8s: it
#                then serves demo.json with that TTL, so that after a WARMUP
#                of 15 codes expire as fast as they come (a steady state)
#                instead of filling the store; unset, the embedded demo's 5m
#   WARMUP       seconds of unmeasured load on the service first (2)
#   PIN          1: both servers on CPU 0 and wrk on CPU 1, so
#                the load generator never takes the servers' core; latency
#                then shows the servers' own tail, not the scheduler's
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
case $ROUNDS in ""|*[!0-9]*|0) echo "ROUNDS is a whole number of at least 1" >&2; exit 2 ;; esac
PORT=${PORT:-18080}
YARD_PORT=${YARD_PORT:-18081}
MODE=${MODE:-yardstick}
PIN=${PIN:-}
srv_pin=() wrk_pin=()
if [ "$PIN" = 1 ]; then
  command -v taskset >/dev/null || { echo "PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  srv_pin=(taskset -c 0) wrk_pin=(taskset -c 1)
fi
case $MODE in
  yardstick)
    A=service B=yardstick
    case ${DURABILITY:=fsync} in
      fsync) TARGET=0.6 P99_TARGET=10 ;;
      interval) TARGET=0.75 P99_TARGET= ;;
      *) echo "DURABILITY is fsync or interval" >&2; exit 2 ;;
    esac ;;
  edge) A=edge B=native TARGET=0.5 P99_TARGET= ;;
  redis)
    A=redis B=embedded TARGET=0.5 P99_TARGET=
    REDIS_PORT=${REDIS_PORT:-18082}
    case ${APPENDFSYNC:=always} in
      always|everysec) ;;
      *) echo "APPENDFSYNC is always or everysec" >&2; exit 2 ;;
    esac
    case ${REPLICAS:=1} in
      1) ;;
      2) A=replicas PORT2=$((REDIS_PORT + 1)) ;;
      *) echo "REPLICAS is 1 or 2" >&2; exit 2 ;;
    esac
    command -v redis-server >/dev/null || { echo "MODE=redis needs redis-server (apt-get install redis-server)" >&2; exit 2; } ;;
  spin) A=spun B=yardstick TARGET=0.8 P99_TARGET= SPIN=${SPIN:?MODE=spin needs SPIN, e.g. 3us} ;;
  *) echo "MODE is yardstick, edge or spin" >&2; exit 2 ;;
esac
STORE_ID=7c9e6679-7425-40de-944b-e07fc1f90ae7
API_KEY=ak_demo_not_secret_do_not_deploy

command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)
command -v curl >/dev/null || (apt-get update && apt-get install -y curl)

if [ -n "${KEEP:-}" ]; then
  work=$KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
fi
svc_pid= svc2_pid= yard_pid= redis_pid=
cleanup() {
  set +e
  for pid in $svc_pid $svc2_pid $yard_pid $redis_pid; do
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -z "${KEEP:-}" ]; then rm -rf "$work"; fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building into $work"
go build -o "$work/deeplink" .
go build -o "$work/yardstick" ./bench/yardstick
if [ "$MODE" = edge ]; then
  GOOS=wasip1 GOARCH=wasm go build -tags nethttpomithttp2 -buildmode=c-shared -trimpath -ldflags=-s -o "$work/service.wasm" .
  go build -o "$work/edgehost" ./wasm
fi

for p in "$PORT" "$YARD_PORT"; do
  if curl -s -o /dev/null "http://127.0.0.1:$p/"; then
    echo "port $p is already in use; set PORT / YARD_PORT" >&2
    exit 2
  fi
done

# wrk sends every registration with one API key, far past the per-key
# request budget a studio's traffic never meets: the load test raises it,
# or it would measure 429s.
fairness='"fairness": {"key_rate": 1000000000, "key_burst": 1000000000}, '

# The service logs one JSON line per request on stderr: send it to a file
# (kept only with KEEP), not the terminal.
if [ "$MODE" = edge ]; then
  # A is the edge host on PORT, B the native build on YARD_PORT: both
  # serve the demo store, each with its own data.
  sed '0,/{/s//{'"$fairness"'/' demo.json >"$work/config.json"
  "${srv_pin[@]}" "$work/edgehost" ${EDGE_FLAGS:-} -config "$work/config.json" -module "$work/service.wasm" -cache "$work/cache" -addr "127.0.0.1:$PORT" -data "$work/data-edge" >"$work/service.out" 2>"$work/service.err" &
  svc_pid=$!
  "${srv_pin[@]}" "$work/deeplink" -config "$work/config.json" -addr "127.0.0.1:$YARD_PORT" -data "$work/data" >"$work/yardstick.out" 2>"$work/yardstick.err" &
  yard_pid=$!
elif [ "$MODE" = redis ]; then
  # A is the service on Redis on PORT, B the service on the embedded
  # store (durability fsync) on YARD_PORT: both serve the demo store.
  mkdir -p "$work/redis"
  "${srv_pin[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$work/redis" --save "" \
    --appendonly yes --appendfsync "$APPENDFSYNC" --logfile redis.log &
  redis_pid=$!
  extra='"storage": {"backend": "redis", "redis_url": "redis://127.0.0.1:'$REDIS_PORT'/0", "redis_prefix": "bench:"}, '
  common=$fairness
  if [ -n "${CODE_TTL:-}" ]; then
    common+='"auth_code_ttl": "'$CODE_TTL'", '
  fi
  if [ "$ROUNDS" -gt 2 ]; then
    common+='"max_live_entries": '$((100000 * (DURATION * ROUNDS + ${WARMUP:-2})))', '
  fi
  sed '0,/{/s#{#{'"$extra$common"'#' demo.json >"$work/config-redis.json"
  sed '0,/{/s//{'"$common"'/' demo.json >"$work/config.json"
  "${srv_pin[@]}" "$work/deeplink" -config "$work/config-redis.json" -addr "127.0.0.1:$PORT" >"$work/service.out" 2>"$work/service.err" &
  svc_pid=$!
  if [ "${REPLICAS:-1}" = 2 ]; then
    "${srv_pin[@]}" "$work/deeplink" -config "$work/config-redis.json" -addr "127.0.0.1:$PORT2" >"$work/service2.out" 2>"$work/service2.err" &
    svc2_pid=$!
  fi
  "${srv_pin[@]}" "$work/deeplink" -config "$work/config.json" -addr "127.0.0.1:$YARD_PORT" -data "$work/data" >"$work/yardstick.out" 2>"$work/yardstick.err" &
  yard_pid=$!
elif [ "$MODE" = spin ]; then
  "${srv_pin[@]}" "$work/yardstick" -spin "$SPIN" -addr "127.0.0.1:$PORT" 2>"$work/service.err" &
  svc_pid=$!
  "${srv_pin[@]}" "$work/yardstick" -addr "127.0.0.1:$YARD_PORT" 2>"$work/yardstick.err" &
  yard_pid=$!
else
  svc_flags=() extra=$fairness
  if [ -n "${CODE_TTL:-}" ]; then
    extra+='"auth_code_ttl": "'$CODE_TTL'", '
  fi
  if [ "$DURABILITY" != fsync ]; then
    extra+='"storage": {"durability": "'$DURABILITY'"}, '
  fi
  if [ "$ROUNDS" -gt 2 ]; then
    # More rounds register more codes than the default cap (2 000 000)
    # holds; past it the service would answer 503.
    extra+='"max_live_entries": '$((100000 * (DURATION * ROUNDS + ${WARMUP:-2})))', '
  fi
  if [ -n "$extra" ]; then
    sed '0,/{/s//{'"$extra"'/' demo.json >"$work/config.json"
    svc_flags=(-config "$work/config.json")
  fi
  "${srv_pin[@]}" "$work/deeplink" "${svc_flags[@]}" -addr "127.0.0.1:$PORT" -data "$work/data" >"$work/service.out" 2>"$work/service.err" &
  svc_pid=$!
  "${srv_pin[@]}" "$work/yardstick" -addr "127.0.0.1:$YARD_PORT" 2>"$work/yardstick.err" &
  yard_pid=$!
fi

wait_ready() { # url name
  for _ in $(seq 1 600); do # the edge build's first start compiles the module
    if curl -sf -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "$2 did not become ready at $1" >&2
  exit 2
}
wait_ready "http://127.0.0.1:$PORT/readyz" "$A"
if [ -n "$svc2_pid" ]; then wait_ready "http://127.0.0.1:$PORT2/readyz" "$A (second)"; fi
wait_ready "http://127.0.0.1:$YARD_PORT/readyz" "$B"

path=/stores/$STORE_ID/auth/auth-code
export BENCH_STORE_ID=$STORE_ID BENCH_API_KEY=$API_KEY BENCH_REDIRECT_PORT=$PORT

# Sanity: the service accepts a registration like those of register.lua.
code=$(curl -s -o "$work/sanity.txt" -w '%{http_code}' "http://127.0.0.1:$PORT$path" \
  -H "X-API-Key: $API_KEY" -H 'Content-Type: application/json' \
  -d '{"auth_code":"sanity-check-'"$$"'-0123456789","redirect_uri":"http://127.0.0.1:'"$PORT"'/stores/'"$STORE_ID"'/auth/callback","client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301","code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"af0ifjsldkj"}')
if [ "$code" != 200 ]; then
  echo "sanity registration answered $code: $(cat "$work/sanity.txt")" >&2
  exit 2
fi

run_wrk() { # name port duration -> log file
  local log="$work/wrk-$1.txt"
  BENCH_RUN="$1-$$-$RANDOM" "${wrk_pin[@]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$3s" --latency \
    -s bench/register.lua "http://127.0.0.1:$2$path" >"$log" 2>&1
  echo "$log"
}

# run_wrk_split is run_wrk over the two replicas at once, half the
# connections each, and writes one log of their figures: requests and
# req/s summed, the higher p99, non-200s and socket errors summed.
run_wrk_split() { # name duration -> log file
  local log="$work/wrk-$1.txt" a="$work/wrk-$1-a.txt" b="$work/wrk-$1-b.txt" half=$((CONNECTIONS / 2))
  BENCH_RUN="$1-a-$$-$RANDOM" "${wrk_pin[@]}" wrk -t"$THREADS" -c"$half" -d"$2s" --latency \
    -s bench/register.lua "http://127.0.0.1:$PORT$path" >"$a" 2>&1 &
  local wa=$!
  BENCH_RUN="$1-b-$$-$RANDOM" BENCH_REDIRECT_PORT=$PORT2 "${wrk_pin[@]}" wrk -t"$THREADS" -c"$half" -d"$2s" --latency \
    -s bench/register.lua "http://127.0.0.1:$PORT2$path" >"$b" 2>&1 &
  wait "$wa" $!
  {
    echo "  $(( $(reqs_of "$a") + $(reqs_of "$b") )) requests in $2s (two wrk)"
    awk -v x="$(rps_of "$a")" -v y="$(rps_of "$b")" 'BEGIN {printf "Requests/sec: %.2f\n", x + y}'
    awk -v x="$(p99_of "$a")" -v y="$(p99_of "$b")" 'BEGIN {printf "     99%%   %.3fms\n", (x + 0 > y + 0 ? x : y)}'
    echo "non-200: $(( $(non200_of "$a") + $(non200_of "$b") ))"
    echo "Socket errors: connect $(( $(errors_of "$a") + $(errors_of "$b") )), read 0, write 0, timeout 0"
    grep -h '^non-200 samples' "$a" "$b" || true
  } >"$log"
  echo "$log"
}

# to_ms converts a wrk latency ("850.00us", "2.35ms", "1.20s", "1.00m") to ms.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
    printf "%.3f", n }'
}
# cpu_ticks is a process's user+system CPU time in clock ticks. CPU per
# request is a second, steadier comparison: other jobs on the host take
# wall time from a run but add little to the CPU each request costs.
hz=$(getconf CLK_TCK)
cpu_ticks() { # pid... (summed)
  local t=0 p
  for p; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
reqs_of() { awk '/ requests in / {print $1}' "$1"; }
rps_of() { awk '/^Requests\/sec:/ {print $2}' "$1"; }
p99_of() { to_ms "$(awk '$1 == "99%" {print $2}' "$1")"; }
non200_of() { awk '/^non-200:/ {print $2}' "$1"; }
errors_of() { # socket errors, summed
  awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10; found = 1 } END { if (!found) print 0 }' "$1"
}

# A short warm-up of each, not counted: first connections, page faults, GC sizing.
run_wrk warm-service "$PORT" "${WARMUP:-2}" >/dev/null
if [ -n "$svc2_pid" ]; then run_wrk warm-service2 "$PORT2" "${WARMUP:-2}" >/dev/null; fi
run_wrk warm-yardstick "$YARD_PORT" 2 >/dev/null

declare -a svc_rps yard_rps svc_p99 yard_p99 svc_cpu yard_cpu
svc_bad=0 yard_bad=0 sock_err=0
for round in $(seq 1 "$ROUNDS"); do
  for who in "$A" "$B"; do
    if [ "$who" = "$A" ]; then port=$PORT pid="$svc_pid $svc2_pid $redis_pid"; else port=$YARD_PORT pid=$yard_pid; fi
    t0=$(cpu_ticks $pid)
    if [ "$who" = "$A" ] && [ -n "$svc2_pid" ]; then
      log=$(run_wrk_split "$who-$round" "$DURATION")
    else
      log=$(run_wrk "$who-$round" "$port" "$DURATION")
    fi
    t1=$(cpu_ticks $pid)
    rps=$(rps_of "$log"); p99=$(p99_of "$log"); bad=$(non200_of "$log"); se=$(errors_of "$log")
    if [ -z "$rps" ] || [ -z "$bad" ]; then
      echo "wrk run $who-$round failed:" >&2; cat "$log" >&2; exit 2
    fi
    cpu=$(awk -v t="$((t1 - t0))" -v hz="$hz" -v n="$(reqs_of "$log")" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
    printf '%-10s run %d: %10.1f req/s  p99 %7.3f ms  %6.1f us CPU/req  non-200 %s  socket errors %s\n' \
      "$who" "$round" "$rps" "$p99" "$cpu" "$bad" "$se"
    grep -h '^non-200 samples' "$log" || true
    sock_err=$((sock_err + se))
    if [ "$who" = "$A" ]; then
      svc_rps+=("$rps"); svc_p99+=("$p99"); svc_cpu+=("$cpu"); svc_bad=$((svc_bad + bad))
    else
      yard_rps+=("$rps"); yard_p99+=("$p99"); yard_cpu+=("$cpu"); yard_bad=$((yard_bad + bad))
    fi
  done
done

join() { local IFS=' '; echo "$*"; }
awk -v S="$(join "${svc_rps[@]}")" -v Y="$(join "${yard_rps[@]}")" \
    -v SP="$(join "${svc_p99[@]}")" -v YP="$(join "${yard_p99[@]}")" \
    -v SC="$(join "${svc_cpu[@]}")" -v YC="$(join "${yard_cpu[@]}")" \
    -v sbad="$svc_bad" -v ybad="$yard_bad" -v serr="$sock_err" -v c="$CONNECTIONS" -v d="$DURATION" \
    -v pin="$PIN" -v an="$A" -v bn="$B" -v target="$TARGET" -v p99t="$P99_TARGET" '
function mean(a, n,   i, t) { for (i = 1; i <= n; i++) t += a[i]; return t / n }
function maxof(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
function list(a, n, f,   i, out) { for (i = 1; i <= n; i++) out = out (i > 1 ? ", " : "") sprintf(f, a[i]); return out }
BEGIN {
  n = split(S, s); split(Y, y); split(SP, sp); split(YP, yp); split(SC, sc); split(YC, yc)
  r = mean(s, n) / mean(y, n)
  for (i = 1; i <= n; i++) pr[i] = s[i] / y[i]
  printf "\nsummary (%d connections, %d s per run, A/B x %d%s)\n", c, d, n, pin == 1 ? ", servers on CPU 0, wrk on CPU 1" : ""
  printf "  %-9s req/s: %s  mean %.1f\n", an, list(s, n, "%.1f"), mean(s, n)
  printf "  %-9s req/s: %s  mean %.1f\n", bn, list(y, n, "%.1f"), mean(y, n)
  printf "  ratio %s/%s: %.3f  (target >= %s)\n", an, bn, r, target
  if (n > 2) printf "  ratio of each round: %s\n", list(pr, n, "%.3f")
  printf "  p99 %-9s %s%s\n", an ":", list(sp, n, "%.3f ms"), p99t == "" ? "" : "  (target < " p99t " ms)"
  printf "  p99 %-9s %s\n", bn ":", list(yp, n, "%.3f ms")
  printf "  CPU per request: %s %.1f us, %s %.1f us; %s/%s %.3f (informational)\n", an, mean(sc, n), bn, mean(yc, n), bn, an, mean(yc, n) / mean(sc, n)
  printf "  non-200: %s %d, %s %d; socket errors %d\n", an, sbad, bn, ybad, serr
  ok = r >= target && (p99t == "" || maxof(sp, n) < p99t + 0) && sbad == 0 && serr == 0
  printf "  %s\n", ok ? "PASS" : "FAIL"
  exit ok ? 0 : 1
}'
