#!/usr/bin/env bash
# Builds the wasm modules (dist/mha.js + mha.wasm: SIMD; dist/mha-threads.*: SIMD + pthreads, with a
# CommonJS glue for Node; dist/mha-baseline.wasm: no SIMD; dist/mha-relaxed.* and mha-relaxed-threads.*:
# their Relaxed SIMD twins) and the TypeScript package (dist/index.js + .d.ts).
# Incremental: ninja and tsc skip work that is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/emscripten-env.sh

if [[ ! -f build/wasm/build.ninja ]]; then
  with_debian_binaryen cmake --preset wasm -DMHA_BUILD_TESTS=${MHA_BUILD_TESTS:-ON} >/dev/null
fi
with_debian_binaryen cmake --build build/wasm --target mha_module mha_module_baseline mha_module_threads mha_module_threads_node \
  mha_module_relaxed mha_module_relaxed_threads mha_module_relaxed_threads_node

# The baseline runs with mha.js: their glues must be the same code (only the wasm file name differs).
if ! diff -q <(sed 's/mha-baseline\.wasm/mha.wasm/g' build/wasm/baseline/mha-baseline.js) dist/mha.js >/dev/null; then
  echo "build.sh: the baseline glue differs from dist/mha.js beyond the file name; ship it (see CMakeLists.txt)" >&2
  exit 1
fi
# The Node glue of the threaded build must drive the same wasm as the browser glue.
if ! cmp -s build/wasm/node-glue/mha-threads.node.wasm dist/mha-threads.wasm; then
  echo "build.sh: mha-threads.node.wasm differs from dist/mha-threads.wasm" >&2
  exit 1
fi
copy_if_changed() { cmp -s "$1" "$2" || cp "$1" "$2"; }
copy_if_changed build/wasm/baseline/mha-baseline.wasm dist/mha-baseline.wasm
# .cjs: the package is "type": "module", so Node would read .js files as ES modules.
copy_if_changed build/wasm/node-glue/mha-threads.node.js dist/mha-threads.node.cjs
copy_if_changed build/wasm/node-glue/mha-threads.node.worker.js dist/mha-threads.node.worker.cjs
rm -f dist/mha-baseline.js

# The relaxed builds (CMakeLists.txt): the .wasm as linked, the glue minified (whitespace and syntax only:
# no renaming), and their pthread workers must be simd-threads' (up to the glue name they fall back to),
# which the loader gives them.
relaxed=build/wasm/relaxed
if ! diff -q <(sed 's/mha-relaxed-threads\.js/mha-threads.js/g' $relaxed/mha-relaxed-threads.worker.js) dist/mha-threads.worker.js >/dev/null ||
   ! cmp -s $relaxed/mha-relaxed-threads.node.worker.js dist/mha-threads.node.worker.cjs; then
  echo "build.sh: the relaxed-simd-threads worker scripts differ from simd-threads'; ship them (see CMakeLists.txt)" >&2
  exit 1
fi
if ! cmp -s $relaxed/mha-relaxed-threads.node.wasm $relaxed/mha-relaxed-threads.wasm; then
  echo "build.sh: mha-relaxed-threads.node.wasm differs from mha-relaxed-threads.wasm" >&2
  exit 1
fi
copy_if_changed $relaxed/mha-relaxed.wasm dist/mha-relaxed.wasm
copy_if_changed $relaxed/mha-relaxed-threads.wasm dist/mha-relaxed-threads.wasm
minify_if_changed() {
  [[ -f "$2" && "$2" -nt "$1" ]] && return 0
  npx esbuild "$1" --minify-whitespace --minify-syntax --log-level=warning --outfile="$2"
}
minify_if_changed $relaxed/mha-relaxed.js dist/mha-relaxed.js
minify_if_changed $relaxed/mha-relaxed-threads.js dist/mha-relaxed-threads.js
minify_if_changed $relaxed/mha-relaxed-threads.node.js dist/mha-relaxed-threads.node.cjs

# Every glue must offer the import names its module asks for (see scripts/emscripten-env.sh).
node --experimental-wasm-relaxed-simd scripts/check-glue-imports.mjs \
  dist/mha.js dist/mha.wasm  dist/mha.js dist/mha-baseline.wasm \
  dist/mha-threads.js dist/mha-threads.wasm  dist/mha-threads.node.cjs dist/mha-threads.wasm \
  dist/mha-relaxed.js dist/mha-relaxed.wasm \
  dist/mha-relaxed-threads.js dist/mha-relaxed-threads.wasm  dist/mha-relaxed-threads.node.cjs dist/mha-relaxed-threads.wasm

# The TS layer checks at load time that the wasm it loads is of its own release.
version=$(node -p "require('./package.json').version")
version_ts="export const VERSION = '${version}';"
[[ "$(cat web/src/version.ts 2>/dev/null)" == "$version_ts" ]] || echo "$version_ts" > web/src/version.ts
# The call structs' slots (web/src/abi-fields.generated.ts) from their field lists in src/call_abi.hpp.
node scripts/gen-abi.mjs
node scripts/gen-cache-dtypes.mjs  # web/src/cache-dtypes.generated.ts from src/mha/cache/cache_codecs.hpp
# tsc type-checks web/src and emits one module per file into build/ts; web/bundle.mjs builds the shipped
# dist/index.js and dist/index.d.ts from them (one file each).
npx tsc -p web/tsconfig.json
node web/bundle.mjs
