#!/usr/bin/env bash
# Interleaved timing of two kernel timing harnesses (bench/kernel/kernel_timing.cpp built against two
# versions of the core), for before/after comparisons on a shared, noisy machine: the runs alternate
# A B B A A B ..., so a slow spell falls on both. Prints per shape the median and range over rounds of
# each side's GFLOP/s and the ratio of the medians, by wall time and by CPU time.
#
#   bench/kernel/compare.sh <harness A .cjs|exe> <harness B .cjs|exe> [rounds=6] [shapes] [budget ms=1000]
#
# A harness for the core of another commit, without its CMake (wasm; from the repository root):
#   git archive <commit> | tar -x -C build/base-src
#   em++ -O3 -std=c++17 -msimd128 -msse4.2 -DNDEBUG -Ibuild/base-src/src -Ibuild/wasm/third_party_include \
#     bench/kernel/kernel_timing.cpp build/base-src/src/mha/<its core sources>.cpp \
#     -sENVIRONMENT=node -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=2GB -o build/timing/old.cjs
# This core's harness: cmake --build build/wasm --target mha_kernel_timing (build/wasm/mha_kernel_timing.cjs).
set -euo pipefail
a=$1 b=$2 rounds=${3:-6} shapes=${4:-bert,bert-b8,causal512,cross,long2k} budget=${5:-1000}
run() { if [[ $1 == *.cjs ]]; then node --no-experimental-fetch --experimental-wasm-relaxed-simd "$1" "$budget" "$shapes"; else "$1" "$budget" "$shapes"; fi; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 0; r < rounds; ++r)); do
  if ((r % 2 == 0)); then order=(A B); else order=(B A); fi
  for side in "${order[@]}"; do
    if [[ $side == A ]]; then exe=$a; else exe=$b; fi
    run "$exe" | sed "s/^/$side /" >>"$log"
  done
done
python3 - "$log" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 7: continue
    side, name, gflops, cpu_gflops = f[0], f[1], float(f[3]), float(f[6])
    rows.setdefault(name, {}).setdefault(side, []).append((gflops, cpu_gflops))
def fmt(x): return f"{st.median(x):.2f} [{min(x):.2f}-{max(x):.2f}]"
for k, label in ((0, 'wall'), (1, 'CPU time')):
    print(f"GFLOP/s by {label}: median [min-max] over rounds")
    print(f"{'shape':<14} {'A':>24} {'B':>24} {'B/A':>6}")
    for name, sides in rows.items():
        a = [x[k] for x in sides.get('A', [])] or [0]
        b = [x[k] for x in sides.get('B', [])] or [0]
        print(f"{name:<14} {fmt(a):>24} {fmt(b):>24} {st.median(b)/st.median(a):6.3f}")
PY
