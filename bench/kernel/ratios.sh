#!/usr/bin/env bash
# Interleaved timing of pairs of shapes in one kernel timing harness (kernel_timing.cpp): each round runs
# every pair, the two shapes alternating which goes first, and the report gives per pair the medians and
# ranges over rounds of the CPU time per call and the ratio of the medians (second / first).
#
#   bench/kernel/ratios.sh <harness .cjs|exe> <rounds> <budget ms> <first:second> [<first:second>...]
#   e.g. bench/kernel/ratios.sh build/wasm/mha_kernel_timing.cjs 6 1500 bert:bert-bias causal8k:window8k
set -euo pipefail
exe=$1 rounds=$2 budget=$3
shift 3
run() { if [[ $exe == *.cjs ]]; then node --no-experimental-fetch "$exe" "$budget" "$1"; else "$exe" "$budget" "$1"; fi; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for pair in "$@"; do
    first=${pair%%:*} second=${pair##*:}
    if ((r % 2 == 0)); then run "$first"; run "$second"; else run "$second"; run "$first"; fi >>"$log"
  done
done
python3 - "$log" "$@" <<'PY'
import sys, statistics as st
cpu = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 6: cpu.setdefault(f[0], []).append(float(f[4]))
def fmt(x): return f"{st.median(x):.2f} [{min(x):.2f}-{max(x):.2f}]"
print(f"CPU ms per call: median [min-max] over rounds")
print(f"{'first':<14} {'':>22} {'second':<14} {'':>22} {'second/first':>12}")
for pair in sys.argv[2:]:
    a, b = pair.split(':')
    print(f"{a:<14} {fmt(cpu[a]):>22} {b:<14} {fmt(cpu[b]):>22} {st.median(cpu[b]) / st.median(cpu[a]):12.3f}")
PY
