#!/usr/bin/env bash
# Where a call's time goes inside the wasm module, instruction by instruction: Linux perf over Node, with
# V8's jitdump (--perf-prof), so that `perf annotate` shows the x86 code TurboFan made of each wasm
# function, with its samples. This is how to see what V8 does with a micro-kernel (spills, the loop's
# stack checks, broadcasts, how far LLVM unrolled it), which the wasm itself does not tell.
#
#   bash bench/perf-wasm.sh [shape] [calls] [build]    e.g.  bash bench/perf-wasm.sh long2k 4 relaxed
#
# shape: a shape of bench/lib/shapes.mjs (default long2k); build: simd (default), relaxed (Node runs it
# with --experimental-wasm-relaxed-simd) or a path to a .wasm of either kind. The call runs on heap
# tensors (no copies timed) on one thread. Output, in a temporary folder (perf and V8 write their
# jitted-*.so and jit-*.dump into the working directory): the hottest symbols, the hottest 512-byte
# regions of the hottest wasm function (its loops), and that function's annotated code in annotate.txt.
# Needs /usr/bin/perf (Debian: linux-perf) and perf_event_paranoid <= 1 or root. Timings under perf are
# a little slower; read the shares, not the speed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shape=${1:-long2k} calls=${2:-4} build=${3:-simd}
command -v perf >/dev/null || { echo "perf-wasm.sh: perf is missing (apt install linux-perf)" >&2; exit 1; }
work=$(mktemp -d /tmp/mha-perf-wasm.XXXXXX)
flags=()
case "$build" in
  simd) wasm="$repo/dist/mha.wasm" ;;
  relaxed) wasm="$repo/dist/mha-relaxed.wasm"; flags+=(--experimental-wasm-relaxed-simd) ;;
  *) wasm=$(realpath "$build"); [[ "$wasm" == *relaxed* ]] && flags+=(--experimental-wasm-relaxed-simd) ;;
esac
cd "$work"
# No Liftoff and no tier-up: every function is compiled once, by TurboFan, and keeps one name in the profile.
perf record -q -k 1 -F 2000 -o perf.data node "${flags[@]}" --perf-prof --no-liftoff --no-wasm-tier-up \
  "$repo/bench/lib/perf-call.mjs" "$wasm" "$shape" "$calls"
perf inject --jit -i perf.data -o perf.jit.data
perf report -q -i perf.jit.data --no-children --sort sym --stdio 2>/dev/null > report.txt
grep -m 12 '%' report.txt
hottest=$(grep -m1 -o 'JS:wasm-function\[[0-9]*\][^ ]*' report.txt)
perf annotate -i perf.jit.data --stdio -s "$hottest" 2>/dev/null > annotate.txt
echo "hottest 512-byte regions of $hottest (% of its samples; the code with its samples: $work/annotate.txt):"
awk '/^ +[0-9.]+ : +[0-9a-f]+:/ { addr = $3; sub(":", "", addr); region = sprintf("%x", int(("0x" addr) / 512) * 512); share[region] += $1 }
     END { for (r in share) if (share[r] >= 1) printf "  %6.2f %%  +0x%s\n", share[r], r }' annotate.txt | sort -rn
