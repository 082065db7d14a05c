#!/usr/bin/env bash
# Every test suite, in order of cost. Fails on the first failing suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/emscripten-env.sh
start=$(date +%s)

echo "== C++ suite, native (Catch2; every kernel variant: simd128 and scalar)"
[[ -f build/native/build.ninja ]] || cmake --preset native >/dev/null
cmake --build build/native
ctest --test-dir build/native --output-on-failure

echo "== C++ suite, native under ASan + UBSan"
[[ -f build/native-asan/build.ninja ]] || cmake --preset native-asan >/dev/null
cmake --build build/native-asan
ctest --test-dir build/native-asan --output-on-failure

echo "== Differential fuzzing slice: every kernel variant vs reference, libFuzzer + ASan + UBSan (fixed seed)"
bash scripts/fuzz.sh --slice

echo "== C++ suite, compiled to wasm and run by Node (Catch2; simd128 and scalar, and the relaxed variant under --experimental-wasm-relaxed-simd)"
with_debian_binaryen cmake --build build/wasm --target mha_tests mha_tests_relaxed
ctest --test-dir build/wasm --output-on-failure

echo "== JS tests (node:test)"
node --test --test-timeout=600000 --test-reporter=spec tests/js/

echo "== Browser tests on Chromium, Firefox ESR, WebKitGTK (without and with the JSC flags) + the JavaScriptCore shell"
browser_start=$(date +%s)
node --test --test-timeout=600000 --test-reporter=spec tests/browser/ tests/jsc/
echo "browser and jsc tests: $(( $(date +%s) - browser_start )) s"

echo "== Consumer tests (npm pack -> empty project: Node ESM/CJS, tsc --strict, Vite (build, dev server, preview), webpack, esbuild, Chromium)"
node --test --test-timeout=600000 --test-reporter=spec tests/consumers/

echo "npm test: all suites passed in $(( $(date +%s) - start )) s"
