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
  [clang-format]=clang-format  # npm run lint (scripts/lint.sh)
  [ninja]=ninja-build
  [clang++]=clang
  # clang-19 + lld-19 build the Relaxed SIMD kernel: Emscripten's clang 14 emits the proposal's old
  # prototype opcodes, which no engine accepts any more
  [clang-19]=clang-19
  [wasm-ld-19]=lld-19
  [/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.asan-x86_64.a]=libclang-rt-14-dev
  # the other browser engines of tests/browser (scripts/lib/engines.mjs) and the JavaScriptCore shell
  [/usr/bin/firefox-esr]=firefox-esr
  [/usr/bin/WebKitWebDriver]=webkit2gtk-driver
  [/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser]=libwebkit2gtk-4.1-0
  [Xvfb]=xvfb
  [/usr/bin/jsc]=libjavascriptcoregtk-4.0-bin
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
  # Another apt or dpkg (unattended-upgrades, a second bootstrap) may hold the locks: install waits for
  # the dpkg lock itself (DPkg::Lock::Timeout), and a step that still fails on a lock is retried.
  apt_waiting() {
    local try output
    for try in $(seq 1 60); do
      if output=$("$@" -o DPkg::Lock::Timeout=300 2>&1); then return 0; fi
      if ! grep -qiE 'could not get lock|unable to lock|is another process using it' <<<"$output"; then
        echo "$output" >&2
        return 1
      fi
      ((try == 1)) && echo "bootstrap: waiting for another apt/dpkg to release its lock"
      sleep 5
    done
    echo "$output" >&2
    return 1
  }
  apt_waiting apt-get update -qq
  apt_waiting apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm ci when node_modules is missing or older than the lock file.
stamp=node_modules/.package-lock.json
if [[ ! -f "$stamp" || package-lock.json -nt "$stamp" ]]; then
  echo "bootstrap: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
