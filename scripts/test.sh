#!/usr/bin/env bash
# Every test suite, in order of cost (`npm test`, what CI runs). Fails on the first failing suite.
#
#   scripts/test.sh --quick   (`npm run test:quick`) the quick tier, a few minutes: the formatters' check
#                             (scripts/lint.sh), the native C++ suite
#                             (the `native` preset, built incrementally, and ctest) and the Node JS suites
#                             (tests/js) on the package as built. No bootstrap, no wasm build, no ASan,
#                             fuzzing, browsers or consumers. It does not build the package: without dist/
#                             it stops and says to run `npm run build` first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/emscripten-env.sh
start=$(date +%s)
quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *) echo "test.sh: unknown argument $1 (expected --quick or nothing)" >&2; exit 2 ;;
esac

if $quick; then
  # The JS suites read dist/ (the package), build/ts/ (tsc's modules) and the wasm builds in dist/.
  for file in dist/index.js dist/mha.js dist/mha.wasm dist/mha-threads.node.cjs build/ts/call-abi.js; do
    if [[ ! -f $file ]]; then
      echo "test.sh --quick: $file is missing; run \`npm run build\` first (the quick tier tests the package as built)" >&2
      exit 1
    fi
  done
  newer=$(find web/src src scripts/gen-abi.mjs -newer dist/index.js -type f ! -name version.ts | head -3)
  if [[ -n $newer ]]; then
    echo "test.sh --quick: warning: changed since the last build (run \`npm run build\` to test them):" $newer >&2
  fi
fi

echo "== Lint: clang-format and prettier (npm run lint)"
bash scripts/lint.sh

echo "== C++ suite, native (Catch2; every kernel variant: simd128 and scalar)"
[[ -f build/native/build.ninja ]] || cmake --preset native >/dev/null
cmake --build build/native
ctest --test-dir build/native --output-on-failure

if $quick; then
  echo "== JS tests (node:test)"
  node --test --test-timeout=600000 --test-reporter=spec tests/js/
  echo "npm run test:quick: the native C++ and JS suites passed in $(( $(date +%s) - start )) s"
  exit 0
fi

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
