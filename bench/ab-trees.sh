#!/usr/bin/env bash
# A/B of bench jobs between two built checkouts (each with its own dist/), in the order A B B A so that a
# drift of the machine shows as disagreeing pairs instead of a ratio:
#
#   bench/ab-trees.sh OLD_TREE NEW_TREE [jobs] [out]    e.g. bench/ab-trees.sh /tmp/old . decode-gqa-4k,decode-b4
#
# Make the old tree with `git worktree add --detach /tmp/old <commit>` and build it (scripts/build.sh).
# Run it with nothing else on the machine (it prints `uptime` before each run). Results: out/<n>-<a|b>/.
# AB_ARGS adds bench/run.mjs options to every run, e.g. AB_ARGS='--impls mha-wasm,mha-wasm-2t' to leave the
# peers out of an A/B of this library's own code.
set -euo pipefail
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
jobs=${3:-decode-gqa-4k,decode-b4,decode-mha-8k}
out=${4:-/tmp/ab}
n=0
for tree in a b b a; do
  n=$((n + 1))
  dir=$new; [[ $tree == a ]] && dir=$old
  echo "== run $n ($tree: $dir): $(uptime)"
  (cd "$dir" && node bench/run.mjs --shapes "$jobs" --budget 3000 ${AB_ARGS:-} --out "$out/$n-$tree" >/dev/null)
done
echo "results in $out/{1-a,2-b,3-b,4-a}/latest.json; summary: node bench/ab-compare.mjs $out"
