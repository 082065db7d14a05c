#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian 12 machine (run as root), then npm ci.
# Idempotent and quiet when everything is already there, so every npm script can call it first.
set -euo pipefail
cd "$(dirname "$0")/.."

# command-or-file -> Debian package that provides it
declare -A NEEDS=(
  [em++]=emscripten
  [/usr/include/xsimd/xsimd.hpp]=libxsimd-dev
  [/usr/include/catch2/catch.hpp]=catch2
  [wasm2wat]=wabt
  [/usr/bin/chromium]=chromium
  [cmake]=cmake
  [ninja]=ninja-build
  [clang++]=clang
  [clang-19]=clang-19  # the Relaxed SIMD kernel (Emscripten's clang 14 emits the proposal's old opcodes)
  [wasm-ld-19]=lld-19
  [/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.asan-x86_64.a]=libclang-rt-14-dev
)
missing=()
for need in "${!NEEDS[@]}"; do
  if [[ "$need" == /* ]]; then [[ -e "$need" ]] || missing+=("${NEEDS[$need]}")
  else command -v "$need" >/dev/null 2>&1 || missing+=("${NEEDS[$need]}"); fi
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm ci when node_modules is missing or older than the lock file.
stamp=node_modules/.package-lock.json
if [[ ! -f "$stamp" || package-lock.json -nt "$stamp" ]]; then
  echo "bootstrap: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
