// Integer arithmetic on int8 and int4 caches (docs/spec.md 5.1) through the API: within the stated bound of
// the float arithmetic (itself the float32 attention over the read-back values, within 1e-5), the same bits
// in every build (simd, baseline, threads, and the relaxed builds in a child Node with Relaxed SIMD) and
// thread count; a saved cache loads as either arithmetic; bad arithmetic options are precise errors that
// leave the heap where it was.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createMHA } from '../../dist/index.js';
import { expectError, repoRoot, runChild } from './helpers.mjs';
import { INTEGER_SCENARIOS, integerFingerprints, runScenario } from './fixtures/integer-scenarios.mjs';

test('integer arithmetic is within 1e-3·max|v| + 1e-6 (out) and 1e-3 (lse) of float arithmetic', async () => {
  const mha = await createMHA({ simd: 'fixed' });
  try {
    for (const scenario of INTEGER_SCENARIOS) {
      const integer = runScenario(mha, scenario, 'integer');
      const float = runScenario(mha, scenario, 'float');
      const bound = 1e-3 * float.maxV + 1e-6;
      let worst = 0,
        differs = false;
      integer.results.forEach(({ out, lse }, step) => {
        const ref = float.results[step];
        for (let i = 0; i < out.length; ++i) {
          const err = Math.abs(out[i] - ref.out[i]);
          assert.ok(err <= bound, `${scenario.name} step ${step} out[${i}]: ${out[i]} against ${ref.out[i]}`);
          worst = Math.max(worst, err / bound);
          differs ||= out[i] !== ref.out[i];
        }
        for (let i = 0; i < lse.length; ++i) {
          if (!Number.isFinite(ref.lse[i])) assert.equal(lse[i], ref.lse[i]);
          else assert.ok(Math.abs(lse[i] - ref.lse[i]) <= 1e-3, `${scenario.name} step ${step} lse[${i}]`);
        }
      });
      assert.ok(differs, `${scenario.name}: the integer path ran (its results are not float arithmetic's)`);
      console.log(`# ${scenario.name}: worst out error / bound ${worst.toExponential(2)}`);
    }
  } finally {
    mha.dispose();
  }
});

test('integer arithmetic gives the same bits in simd, baseline, 2 and 3 threads, relaxed-simd and relaxed-simd-threads', async () => {
  const builds = [
    ['simd', { simd: 'fixed' }],
    ['baseline', { simd: false }],
    ['simd-threads (2)', { simd: 'fixed', threads: 2 }],
    ['simd-threads (3)', { simd: 'fixed', threads: 3 }],
  ];
  let first;
  for (const [label, options] of builds) {
    const mha = await createMHA(options);
    const prints = integerFingerprints(mha);
    mha.dispose();
    if (first === undefined) first = prints;
    else prints.forEach((p, i) => assert.equal(p, first[i], `${label}: ${INTEGER_SCENARIOS[i].name}`));
  }
  const fixture = pathToFileURL(path.join(repoRoot, 'tests/js/fixtures/integer-scenarios.mjs')).href;
  const index = pathToFileURL(path.join(repoRoot, 'dist/index.js')).href;
  const source =
    `import { createMHA } from '${index}';\nimport { integerFingerprints } from '${fixture}';\n` +
    'const out = {};\nfor (const threads of [1, 2]) {\n  const mha = await createMHA({ threads });\n' +
    '  out[mha.info.build] = integerFingerprints(mha);\n  mha.dispose();\n}\nconsole.log(JSON.stringify(out));';
  const { code, stdout, stderr } = await runChild(source, {
    nodeFlags: ['--experimental-wasm-relaxed-simd'],
    timeoutMs: 300000,
  });
  assert.equal(code, 0, stderr);
  const relaxed = JSON.parse(stdout.trim().split('\n').at(-1));
  assert.deepEqual(Object.keys(relaxed).sort(), ['relaxed-simd', 'relaxed-simd-threads']);
  for (const [build, prints] of Object.entries(relaxed))
    prints.forEach((p, i) => assert.equal(p, first[i], `${build}: ${INTEGER_SCENARIOS[i].name}`));
});

test('a saved int8 or int4 cache loads as either arithmetic; the loaded cache decodes as the original', async () => {
  const mha = await createMHA();
  try {
    for (const dtype of ['int8', 'int4']) {
      const dims = { batch: 1, numKvHeads: 2, headDim: 48, capacity: 40, dtype };
      const cache = mha.createKVCache({ ...dims, arithmetic: 'integer' });
      assert.equal(cache.arithmetic, 'integer');
      const x = Float32Array.from({ length: 20 * 4 * 48 }, (_, i) => Math.sin(i * 0.37));
      cache.attend(x, x.subarray(0, 20 * 2 * 48), x.subarray(0, 20 * 2 * 48), { numHeads: 4 });
      const bytes = cache.save();
      const asInteger = mha.loadKVCache(bytes, { arithmetic: 'integer' });
      const asFloat = mha.loadKVCache(bytes);
      assert.equal(asInteger.arithmetic, 'integer');
      assert.equal(asFloat.arithmetic, 'float');
      const [q, kv] = [x.subarray(0, 4 * 48), x.subarray(96, 96 + 2 * 48)];
      const want = cache.attend(q, kv, kv, { numHeads: 4 });
      assert.deepEqual(asInteger.attend(q, kv, kv, { numHeads: 4 }), want);
      assert.notDeepEqual(asFloat.attend(q, kv, kv, { numHeads: 4 }), want);
      for (const c of [cache, asInteger, asFloat]) c.free();
    }
  } finally {
    mha.dispose();
  }
});

test('bad arithmetic: another dtype, an unknown name or type, a float save loaded as integer; nothing leaks', async () => {
  const mha = await createMHA();
  try {
    const dims = { batch: 1, numKvHeads: 1, headDim: 8, capacity: 4 };
    const f32 = mha.createKVCache(dims);
    f32.attend(new Float32Array(8), new Float32Array(8), new Float32Array(8), { numHeads: 1 });
    const saved = f32.save();
    mha.loadKVCache(saved).free(); // the staging arena grows to a load's size once
    const heap = mha.memoryStats().heapBytesInUse;
    for (const dtype of ['float32', 'float16', 'bfloat16']) {
      for (const arithmetic of ['integer', 'float']) {
        expectError(() => mha.createKVCache({ ...dims, dtype, arithmetic }), TypeError, [
          'createKVCache: arithmetic',
          "'int8' and 'int4' caches only",
          `'${dtype}' cache`,
        ]);
      }
    }
    expectError(() => mha.createKVCache({ ...dims, dtype: 'int8', arithmetic: 'int' }), RangeError, [
      'createKVCache: arithmetic',
      "expected 'float' or 'integer'",
      'int',
    ]);
    expectError(() => mha.createKVCache({ ...dims, dtype: 'int4', arithmetic: 1 }), TypeError, [
      'createKVCache: arithmetic',
      "expected 'float' or 'integer'",
    ]);
    expectError(() => mha.loadKVCache(saved, { arithmetic: 'integer' }), TypeError, [
      'loadKVCache: arithmetic',
      'int8 or int4',
      'float32 cache',
    ]);
    expectError(() => mha.loadKVCache(saved, { arithmetic: 'fast' }), RangeError, ['loadKVCache: arithmetic']);
    assert.equal(mha.memoryStats().heapBytesInUse, heap, 'the refusals allocate nothing');
    assert.equal(mha.loadKVCache(saved).arithmetic, 'float');
    f32.free();
  } finally {
    mha.dispose();
  }
});
