#!/usr/bin/env bash
# How much slower the same Go code runs as the edge module than natively:
# the register handler benchmark (routing, logging, metrics, validation,
# store, no network) and HMAC-SHA256 signing (pure computation), each run
# natively on one CPU and then compiled to wasip1 and run under wazero
# (bench/wasmrun; no call deadline, so no termination checks). Both runs
# are in one invocation, side by side, so the factor is a ratio measured on
# the same machine at the same time.
#
# Why it matters (issue 4, README "Edge build"): the edge build's register
# throughput can be at most the native build's CPU per request divided by
# the module's CPU per request. The module's handler alone, at this factor,
# already costs about three times a whole native request.
#
# Environment: N (iterations per benchmark, 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

benches='BenchmarkRegister$|BenchmarkSign$'

# The whole output is kept, so that a failing run shows why. The wasm test
# binary runs under bench/wasmrun, which gives it the edge host's host
# functions (its state is the host's, as the module's is).
go test -run '^$' -bench "$benches" -cpu 1 -benchtime "${N}x" . >"$work/native.out" ||
  { cat "$work/native.out" >&2; exit 1; }
GOOS=wasip1 GOARCH=wasm go test -c -o "$work/root.wasm" . &&
  go run ./bench/wasmrun "$work/root.wasm" -test.run '^$' -test.bench "$benches" -test.benchtime "${N}x" >"$work/wasm.out" ||
  { cat "$work/wasm.out" >&2; exit 1; }
grep '^Benchmark' "$work/native.out" >"$work/native.txt"
grep '^Benchmark' "$work/wasm.out" >"$work/wasm.txt"

# Benchmark names carry a -N suffix natively with -cpu 1 on some versions:
# match on the name before it.
awk '
  { name = $1; sub(/-[0-9]+$/, "", name) }
  FNR == NR { native[name] = $3; next }
  name in native {
    printf "%-20s native %9.0f ns/op   wasm %9.0f ns/op   wasm/native %5.1fx\n", name, native[name], $3, $3 / native[name]
  }' "$work/native.txt" "$work/wasm.txt"
