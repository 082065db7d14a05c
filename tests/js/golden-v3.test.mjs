// The PyTorch golden set of docs/spec.md Part 4 (tests/golden/v3): every case through the shared runner
// (scripts/lib/golden-runner.mjs, which the pages and jsc also run) on the simd, baseline and threaded
// builds, with the accuracy rule of docs/spec.md and, for float16 outputs, one binary16 step beyond it.
// attentionWeights (the reference) is checked for every option and stage, multiHeadAttention and the KV
// cache for every case they take (bfloat16 and int8 caches also read back bit for bit as kread/vread).
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createMHA } from '../../dist/index.js';
import { runGoldenCase, SKIPPED_CASES } from '../../scripts/lib/golden-runner.mjs';
import { goldenV3Dir, loadGoldenCases } from './helpers.mjs';

const cases = loadGoldenCases(goldenV3Dir);
const read = (file) => fs.readFileSync(path.join(goldenV3Dir, file));

test('the v3 golden set is present: 26 cases, every Part 4 option, the skipped ones by name', () => {
  assert.equal(cases.length, 26);
  const used = new Set(cases.flatMap((c) => Object.keys(c.options)));
  for (const option of ['vHeadDim', 'dtype', 'sinks', 'rope']) assert.ok(used.has(option), `no case sets ${option}`);
  for (const name of Object.keys(SKIPPED_CASES))
    assert.ok(
      cases.some((c) => c.name === name),
      `no case ${name}`,
    );
});

const BUILDS = [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
];
/** The sections of docs/spec.md Part 4 a check of case `c` tests. */
function sectionsOf(c, check) {
  const o = c.options;
  return [
    o.vHeadDim !== undefined && '4.1 vHeadDim',
    o.dtype === 'float16' && '4.2 float16',
    check.what.includes('stage') && '4.3 stage',
    o.sinks !== undefined && '4.4 sinks',
    o.rope !== undefined && '4.5 rope',
  ]
    .filter(Boolean)
    .map((section) => `spec ${section}`);
}

/** The worst error / tolerance of each kind of check and each section of Part 4, over every build (printed by the summary). */
const worst = new Map();

// Every instance is made before any test is registered, so the summary runs last.
const instances = [];
for (const [label, createOptions] of BUILDS) instances.push([label, await createMHA(createOptions)]);
after(() => instances.forEach(([, mha]) => mha.dispose()));

for (const [label, mha] of instances) {
  for (const c of cases) {
    const skipped = SKIPPED_CASES[c.name];
    test(`${label}: v3 ${c.name}${skipped ? ` (skipped: ${skipped})` : ''}`, { skip: skipped }, async () => {
      const { checks } = await runGoldenCase(mha, c, read);
      assert.ok(checks.length > 0);
      assert.deepEqual(
        checks.filter((x) => !x.pass).map((x) => `${x.what}: ${x.problem}`),
        [],
      );
      for (const x of checks) {
        const ratio = x.tolerance > 0 ? x.maxError / x.tolerance : 0;
        for (const kind of [x.what.replace(/ \(.*\)/, ''), ...sectionsOf(c, x)]) {
          if (!(worst.get(kind)?.ratio >= ratio))
            worst.set(kind, { ratio, maxError: x.maxError, tolerance: x.tolerance, name: c.name });
        }
      }
      // Run again, a case leaves nothing behind on the heap: the staging is reused. Measured from a second
      // run: the first run of a new shape may still grow the decode scratch, and a 64-byte aligned
      // allocation's in-use bytes depend on where the allocator places it.
      await runGoldenCase(mha, c, read);
      const before = mha.memoryStats().heapBytesInUse;
      await runGoldenCase(mha, c, read);
      assert.equal(mha.memoryStats().heapBytesInUse, before, 'heap bytes in use after running the case again');
    });
  }
}

test('v3 summary: the worst error / tolerance of each check', () => {
  for (const [kind, w] of worst) {
    console.log(
      `# ${kind}: worst ${w.ratio.toExponential(3)} of the tolerance (|error| ${w.maxError?.toExponential(3)}, ` +
        `tolerance ${w.tolerance?.toExponential(3)}, ${w.name})`,
    );
    assert.ok(w.ratio <= 1);
  }
});
