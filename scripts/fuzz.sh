#!/usr/bin/env bash
# Fuzzing under libFuzzer + ASan + UBSan, native clang++ (bootstrap installs clang and libclang-rt-14-dev):
#   fuzz_attention       differential: every kernel variant vs the double reference (tests/fuzz/fuzz_attention.cpp)
#   fuzz_kv_cache_load   the saved-cache parser on untrusted bytes (tests/fuzz/fuzz_kv_cache_load.cpp)
#
#   scripts/fuzz.sh [seconds]          fuzz_attention for that long (default 600), new inputs in build/fuzz/corpus
#   MHA_FUZZ_TARGET=kv_cache_load scripts/fuzz.sh [seconds]
#                                      fuzz_kv_cache_load instead, new inputs in build/fuzz/corpus-kv-cache
#   scripts/fuzz.sh --slice            the short fixed-seed slices scripts/test.sh runs: fuzz_attention (4000
#                                      inputs, 30 s at most), then fuzz_kv_cache_load (20000 inputs, about a second)
#   extra libFuzzer flags after --     e.g. scripts/fuzz.sh 60 -- -jobs=2
#
# Findings are written to build/fuzz/artifacts/ (crash-*, with the failing check on stderr); replay one
# with build/fuzz/fuzz_attention <file> (MHA_FUZZ_VERBOSE=1 prints the inputs of the failing row), or
# build/fuzz/fuzz_kv_cache_load <file>.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=time seconds=600
if [[ "${1:-}" == "--slice" ]]; then mode=slice; shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
[[ "${1:-}" == "--" ]] && shift

[[ -f build/fuzz/build.ninja ]] || cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target fuzz_attention fuzz_kv_cache_load
mkdir -p build/fuzz/corpus build/fuzz/corpus-kv-cache build/fuzz/artifacts
export MHA_FUZZ_STATS=1
common=(-artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1)
attention=(build/fuzz/fuzz_attention -max_len=256 "${common[@]}")
# Saves of small caches are a few hundred bytes; 4 KiB leaves room for larger batches and dims.
kv_cache=(build/fuzz/fuzz_kv_cache_load -max_len=4096 "${common[@]}")

if [[ $mode == slice ]]; then
  # Non-finite results must match the reference exactly (kernels recompute such rows with it).
  export MHA_FUZZ_STRICT=1
  # Fixed seed and run count: the same inputs every time, from the committed corpus only. libFuzzer
  # writes new inputs into its first corpus folder: a throwaway one, so the committed corpora stay as they are.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  mkdir "$scratch/attention" "$scratch/kv-cache"
  "${attention[@]}" -seed=1 -runs="${MHA_FUZZ_RUNS:-4000}" -max_total_time=30 "$@" "$scratch/attention" tests/fuzz/corpus
  "${kv_cache[@]}" -seed=1 -runs="${MHA_FUZZ_KV_RUNS:-20000}" -max_total_time=30 "$@" "$scratch/kv-cache" tests/fuzz/corpus-kv-cache
elif [[ "${MHA_FUZZ_TARGET:-attention}" == kv_cache_load ]]; then
  echo "fuzz_kv_cache_load: ${seconds} s; corpus build/fuzz/corpus-kv-cache (seeded from tests/fuzz/corpus-kv-cache)"
  "${kv_cache[@]}" -max_total_time="$seconds" "$@" build/fuzz/corpus-kv-cache tests/fuzz/corpus-kv-cache
else
  echo "fuzz: ${seconds} s; corpus build/fuzz/corpus (seeded from tests/fuzz/corpus)"
  "${attention[@]}" -max_total_time="$seconds" "$@" build/fuzz/corpus tests/fuzz/corpus
fi
