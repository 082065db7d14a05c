#!/usr/bin/env bash
# Differential fuzzing of every kernel variant against the double reference (tests/fuzz/fuzz_attention.cpp),
# libFuzzer + ASan + UBSan, native clang++ (bootstrap installs clang and libclang-rt-14-dev).
#
#   scripts/fuzz.sh [seconds]          fuzz for that long (default 600), new inputs in build/fuzz/corpus
#   scripts/fuzz.sh --slice            the short fixed-seed slice scripts/test.sh runs (4000 inputs, 30 s at most)
#   extra libFuzzer flags after --     e.g. scripts/fuzz.sh 60 -- -jobs=2
#
# Findings are written to build/fuzz/artifacts/ (crash-*, with the failing check on stderr); replay one
# with build/fuzz/fuzz_attention <file> (MHA_FUZZ_VERBOSE=1 prints the inputs of the failing row).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=time seconds=600
if [[ "${1:-}" == "--slice" ]]; then mode=slice; shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
[[ "${1:-}" == "--" ]] && shift

[[ -f build/fuzz/build.ninja ]] || cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target fuzz_attention
mkdir -p build/fuzz/corpus build/fuzz/artifacts
export MHA_FUZZ_STATS=1
fuzz=(build/fuzz/fuzz_attention -max_len=256 -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1)

if [[ $mode == slice ]]; then
  # Non-finite results must match the reference exactly (kernels recompute such rows with it).
  export MHA_FUZZ_STRICT=1
  # Fixed seed and run count: the same inputs every time, from the committed corpus only. libFuzzer
  # writes new inputs into its first corpus folder: a throwaway one, so tests/fuzz/corpus stays as committed.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  "${fuzz[@]}" -seed=1 -runs="${MHA_FUZZ_RUNS:-4000}" -max_total_time=30 "$@" "$scratch" tests/fuzz/corpus
else
  echo "fuzz: ${seconds} s; corpus build/fuzz/corpus (seeded from tests/fuzz/corpus)"
  "${fuzz[@]}" -max_total_time="$seconds" "$@" build/fuzz/corpus tests/fuzz/corpus
fi
