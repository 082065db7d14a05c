// A digest of every golden case's outputs (tests/golden v1-v4, through scripts/lib/golden-runner.mjs) on each
// build of a built package, for checking that a change leaves the bits alone: run it before and after, diff.
//
//   node --experimental-wasm-relaxed-simd scripts/golden-digest.mjs [dist folder] > digest.txt
//
// One line per (build, set, case): the SHA-256 of the output bytes the runner checks against out64 (a cache
// case's stacked steps), then one line per build over all its cases. The relaxed builds need the flag (Node 20).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { GOLDEN_SETS, runGoldenCase } from './lib/golden-runner.mjs';
import { loadGoldenCases, repoRoot } from './lib/golden.mjs';

const dist = path.resolve(process.argv[2] ?? path.join(repoRoot, 'dist'));
const { createMHA } = await import(pathToFileURL(path.join(dist, 'index.js')).href);

const BUILDS = [
  ['simd', { simd: 'fixed' }],
  ['simd-threads', { simd: 'fixed', threads: 2 }],
  ['baseline', { simd: false }],
  ['relaxed-simd', { simd: 'auto' }],
  ['relaxed-simd-threads', { simd: 'auto', threads: 2 }],
];

for (const [label, options] of BUILDS) {
  const mha = await createMHA(options);
  const whole = crypto.createHash('sha256');
  try {
    if (mha.info.build !== label) throw new Error(`asked for ${label}, got ${mha.info.build} (relaxed needs the flag)`);
    for (const set of GOLDEN_SETS) {
      const dir = path.join(repoRoot, 'tests/golden', set);
      const read = (file) => fs.readFileSync(path.join(dir, file));
      for (const c of loadGoldenCases(dir)) {
        const hash = crypto.createHash('sha256');
        await runGoldenCase(mha, c, read, (out) =>
          hash.update(new Uint8Array(out.buffer, out.byteOffset, out.byteLength)),
        );
        const digest = hash.digest('hex');
        whole.update(digest);
        console.log(`${label} ${set} ${c.name} ${digest}`);
      }
    }
  } finally {
    mha.dispose();
  }
  console.log(`${label} all ${whole.digest('hex')}`);
}
