// The PyTorch golden set of docs/spec.md Part 5 (tests/golden/v4): every case through the shared runner
// (scripts/lib/golden-runner.mjs -> golden-serving.mjs, which the pages and jsc also run) on the simd,
// baseline and threaded builds, with the accuracy rule of docs/spec.md: a shared prefix (cache.attend's
// `prefix`, its lse), mergeAttention over partial states, cache.reorder and ring caches, and the int4 cache
// (docs/spec.md 5.1).
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createMHA } from '../../dist/index.js';
import { runGoldenCase } from '../../scripts/lib/golden-runner.mjs';
import { goldenV4Dir, loadGoldenCases } from './helpers.mjs';

const cases = loadGoldenCases(goldenV4Dir);
const read = (file) => fs.readFileSync(path.join(goldenV4Dir, file));
const isInt4 = (c) => c.cache?.dtype === 'int4';

test('the v4 golden set is present: 16 cases, each feature and every cache dtype', () => {
  assert.equal(cases.length, 16);
  const has = (predicate, what) => assert.ok(cases.some(predicate), `no case with ${what}`);
  has((c) => c.prefix, 'a prefix');
  has((c) => c.cache?.reorder, 'a reorder');
  has((c) => c.cache?.ring, 'a ring');
  has((c) => c.kind === 'merge', 'merged states');
  for (const dtype of ['float32', 'float16', 'bfloat16', 'int8', 'int4'])
    has((c) => c.prefix && c.cache.dtype === dtype, `a ${dtype} prefix`);
  for (const dtype of ['float32', 'float16', 'int8', 'int4'])
    has((c) => c.cache?.ring && c.cache.dtype === dtype, `a ${dtype} ring`);
  assert.equal(cases.filter(isInt4).length, 5);
});

const BUILDS = [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
];

/** The worst error / tolerance of each kind of check, over every build (printed by the summary). */
const worst = new Map();

const instances = [];
for (const [label, createOptions] of BUILDS) instances.push([label, await createMHA(createOptions)]);
after(() => instances.forEach(([, mha]) => mha.dispose()));

for (const [label, mha] of instances) {
  for (const c of cases) {
    test(`${label}: v4 ${c.name}`, async () => {
      const { checks, skipped } = await runGoldenCase(mha, c, read);
      assert.equal(skipped, undefined);
      assert.ok(checks.length >= (c.kind === 'merge' ? 4 : 3));
      assert.deepEqual(
        checks.filter((x) => !x.pass).map((x) => `${x.what}: ${x.problem}`),
        [],
      );
      for (const x of checks.filter((check) => check.tolerance > 0)) {
        const ratio = x.maxError / x.tolerance;
        const kind = x.what.replace(/ \(.*?\)/, '').replace(/\d+ /, '');
        if (!(worst.get(kind)?.ratio >= ratio))
          worst.set(kind, { ratio, maxError: x.maxError, tolerance: x.tolerance, name: c.name });
      }
      // Again: a case leaves nothing behind on the heap (caches and prefixes freed, staging reused). Two more
      // runs first: the first cases of an instance grow its staging and registry to their steady size (seen:
      // +112 then +32 bytes, then flat over 12 runs).
      await runGoldenCase(mha, c, read);
      await runGoldenCase(mha, c, read);
      const before = mha.memoryStats().heapBytesInUse;
      await runGoldenCase(mha, c, read);
      assert.equal(mha.memoryStats().heapBytesInUse, before, 'heap bytes in use after running the case again');
    });
  }
}

test('v4 summary: the worst error / tolerance of each check', () => {
  for (const [kind, w] of worst) {
    console.log(
      `# ${kind}: worst ${w.ratio.toExponential(3)} of the tolerance (|error| ${w.maxError?.toExponential(3)}, ` +
        `tolerance ${w.tolerance?.toExponential(3)}, ${w.name})`,
    );
    assert.ok(w.ratio <= 1);
  }
});
