#!/usr/bin/env bash
# `npm run lint`: fails when a C++ source (clang-format, .clang-format) or a TypeScript/JavaScript source
# (prettier, .prettierrc.json) is not formatted, and names the files (`npm run format` rewrites them), or
# when src/ uses an SSE intrinsic, or when a line of src/ or web/src runs past 120 columns.
# Part of the quick tier (scripts/test.sh --quick) and so of npm test.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
[[ "${1:-}" == --fix ]] && mode=fix

# Tracked and new (not ignored) files, so that a file not yet committed is checked too.
sources() { git ls-files --cached --others --exclude-standard -- "$@" | while read -r f; do [[ -f $f ]] && echo "$f"; done; }
mapfile -t cpp < <(sources 'src/*.cpp' 'src/*.hpp' 'tests/*.cpp' 'tests/*.hpp' 'bench/*.cpp' 'bench/*.hpp')
status=0
if [[ $mode == fix ]]; then
  clang-format -i "${cpp[@]}"
else
  bad=()
  for f in "${cpp[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    echo "lint: ${#bad[@]} C++ file(s) not formatted by clang-format (npm run format rewrites them):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    status=1
  fi
fi
# One SIMD dialect in src/: xsimd, and wasm_simd128.h (through src/mha/simd/simd_ops.hpp) where xsimd lacks
# the operation; SSE intrinsics would hide, behind Emscripten's emulation, which WebAssembly runs.
if git grep -n --untracked -e '_mm_' -e '__m128' -- src >&2; then
  echo "lint: SSE intrinsics in src/ (above): write xsimd, or wasm_simd128.h through a wrapper in src/mha/simd/simd_ops.hpp" >&2
  status=1
fi
# The formatters cannot break a long string or comment, so the runtime sources are held to their 120 columns
# here (the 500-line rule counts lines; a 200-column line would hide two).
if long=$(sources 'src/*' 'web/src/*' | xargs awk 'length($0) > 120 { print FILENAME ":" FNR ": " length($0) " columns" }') &&
  [[ -n $long ]]; then
  echo "lint: lines over 120 columns in src/ or web/src (split the string or wrap the comment):" >&2
  echo "$long" | sed 's/^/  /' >&2
  status=1
fi
if [[ $mode == fix ]]; then
  npx prettier --log-level warn --write .
elif ! npx prettier --log-level warn --check . ; then
  echo "lint: the files above are not formatted by prettier (npm run format rewrites them)" >&2
  status=1
fi
exit $status
