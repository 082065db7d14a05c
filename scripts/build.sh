#!/usr/bin/env bash
# Builds the wasm module (dist/mha.js + dist/mha.wasm) and the TypeScript package (dist/index.js + .d.ts).
# Incremental: ninja and tsc skip work that is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
# Emscripten's JS optimizer runs under this Node, which does not search Debian's node modules by itself.
export NODE_PATH=/usr/share/nodejs

if [[ ! -f build/wasm/build.ninja ]]; then
  cmake --preset wasm -DMHA_BUILD_TESTS=${MHA_BUILD_TESTS:-ON} >/dev/null
fi
cmake --build build/wasm --target mha_module

# The TS layer checks at load time that the wasm it loads is of its own release.
version=$(node -p "require('./package.json').version")
version_ts="export const VERSION = '${version}';"
[[ "$(cat web/src/version.ts 2>/dev/null)" == "$version_ts" ]] || echo "$version_ts" > web/src/version.ts
npx tsc -p web/tsconfig.json
