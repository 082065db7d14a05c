// Sequences of different lengths in one cache through the API (docs/spec.md 4.6 and 4.7): a ragged batch
// gives, bit for bit, what each sequence gives alone in a batch of 1, on the simd, baseline, default
// (relaxed where the engine has it) and threaded builds and for float32 and float16 caches with rope, sinks and vHeadDim; padding rows are not
// read and come out 0; lengths, length, truncate([...]) and read; bad newTokens, truncations and reads
// get precise errors and change nothing; and a long ragged loop leaves the heap where it was.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, mulberry32, randomNormal } from './helpers.mjs';
import { float16Bits } from '../../scripts/lib/float16.mjs';

const B = 4,
  H = 8,
  Hkv = 2,
  Dh = 16,
  Dv = 12,
  CAPACITY = 96;
// Per step: real rows of each sequence (n = their max), or a truncation to these lengths. Sequences 0
// and 3 start with a tiled prefill, 1 with a short one, 2 stays empty and then gets its prefill.
const SCHEDULE = [
  [37, 5, 0, 20],
  [1, 1, 0, 1],
  [3, 0, 17, 1],
  { truncate: [30, 6, 10, 21] },
  [1, 1, 1, 0],
  [2, 2, 2, 2],
  [0, 0, 0, 0],
  [1, 24, 1, 1],
];

const BUILDS = [
  ['simd', { simd: 'fixed' }],
  ['baseline', { simd: false }],
  [undefined, {}],
  [undefined, { threads: 3 }],
];
const instances = [];
for (const [label, options] of BUILDS) {
  const mha = await createMHA(options);
  instances.push([label ?? `${mha.info.build} (${mha.info.threads} thread${mha.info.threads > 1 ? 's' : ''})`, mha]);
}
after(() => instances.forEach(([, mha]) => mha.dispose()));

/** Rows [0, count) of sequence b of a (B, n, width) tensor. */
const rowsOf = (x, b, n, width, count) => x.slice(b * n * width, (b * n + count) * width);

/** The schedule through one ragged cache and through B caches of one sequence: real rows bit-identical, padding rows 0. */
function checkSchedule(mha, { dtype, rope, sinks }) {
  const random = mulberry32(17);
  const options = { numHeads: H, ...(rope ? { rope } : {}), ...(sinks ? { sinks } : {}) };
  const cacheOptions = { batch: B, numKvHeads: Hkv, headDim: Dh, vHeadDim: Dv, capacity: CAPACITY, dtype };
  const together = mha.createKVCache(cacheOptions);
  const alone = Array.from({ length: B }, () => mha.createKVCache({ ...cacheOptions, batch: 1 }));
  try {
    for (const step of SCHEDULE) {
      if (step.truncate) {
        together.truncate(step.truncate);
        alone.forEach((cache, b) => cache.truncate(step.truncate[b]));
        assert.deepEqual([...together.lengths], step.truncate);
        continue;
      }
      const n = Math.max(1, ...step);
      const [q, k, v] = [H * Dh, Hkv * Dh, Hkv * Dv].map((width) => randomNormal(B * n * width, random));
      for (let b = 0; b < B; b++) {
        // padding rows: never read
        for (const [x, width] of [
          [q, H * Dh],
          [k, Hkv * Dh],
          [v, Hkv * Dv],
        ])
          x.fill(NaN, (b * n + step[b]) * width, (b + 1) * n * width);
      }
      const out = together.attend(q, k, v, { ...options, newTokens: step });
      for (let b = 0; b < B; b++) {
        const padding = out.subarray((b * n + step[b]) * H * Dv, (b + 1) * n * H * Dv);
        assert.ok(
          padding.every((x) => x === 0),
          `sequence ${b}: padding out rows are 0`,
        );
        if (step[b] === 0) continue;
        const own = alone[b].attend(
          rowsOf(q, b, n, H * Dh, step[b]),
          rowsOf(k, b, n, Hkv * Dh, step[b]),
          rowsOf(v, b, n, Hkv * Dv, step[b]),
          options,
        );
        assert.ok(
          bitsEqual(own, out.subarray(b * n * H * Dv, (b * n + step[b]) * H * Dv)),
          `sequence ${b} of step [${step}]: bits of the sequence alone`,
        );
      }
      assert.deepEqual(
        [...together.lengths],
        alone.map((cache) => cache.length),
      );
    }
    // read: tokens [start, end) of every sequence, each equal to its own cache's.
    const shortest = Math.min(...together.lengths);
    const { k, v } = together.read({ start: 2, end: shortest });
    assert.equal(k.constructor, dtype === 'float16' ? Uint16Array : Float32Array);
    const tokens = shortest - 2;
    for (let b = 0; b < B; b++) {
      const mine = alone[b].read({ start: 2, end: shortest });
      assert.ok(
        bitsEqual(mine.k, k.subarray(b * tokens * Hkv * Dh, (b + 1) * tokens * Hkv * Dh)),
        `read k of sequence ${b}`,
      );
      assert.ok(
        bitsEqual(mine.v, v.subarray(b * tokens * Hkv * Dv, (b + 1) * tokens * Hkv * Dv)),
        `read v of sequence ${b}`,
      );
    }
  } finally {
    together.free();
    alone.forEach((cache) => cache.free());
  }
}

for (const [label, mha] of instances) {
  for (const dtype of ['float32', 'float16']) {
    test(`${label}, ${dtype} cache: each sequence of a ragged batch gives the bits it gives alone`, () => {
      checkSchedule(mha, { dtype });
      const rope = { ...mha.ropeTables({ positions: CAPACITY, rotaryDim: Dh }), rotaryDim: Dh };
      checkSchedule(mha, { dtype, rope, sinks: new Float32Array(H).map((_, h) => h - 3) });
    });
  }
}

test('read: float32 values as given, float16 bits as rounded; keys in (B, T, Hkv*Dh), values in (B, T, Hkv*Dv)', () => {
  const [, mha] = instances[0];
  const random = mulberry32(3);
  for (const dtype of ['float32', 'float16']) {
    const cache = mha.createKVCache({ batch: 2, numKvHeads: Hkv, headDim: Dh, vHeadDim: Dv, capacity: 8, dtype });
    const [k, v] = [Hkv * Dh, Hkv * Dv].map((width) => randomNormal(2 * 5 * width, random));
    cache.attend(randomNormal(2 * 5 * H * Dh, random), k, v, { numHeads: H });
    const expect = (x) => (dtype === 'float16' ? Uint16Array.from(x, float16Bits) : x);
    const all = cache.read();
    assert.ok(bitsEqual(all.k, expect(k)) && bitsEqual(all.v, expect(v)), `${dtype}: read() is what was stored`);
    const part = cache.read({ start: 1, end: 3 });
    assert.equal(part.k.length, 2 * 2 * Hkv * Dh);
    assert.ok(
      bitsEqual(part.k.subarray(2 * Hkv * Dh, 4 * Hkv * Dh), expect(k.subarray(6 * Hkv * Dh, 8 * Hkv * Dh))),
      'sequence 1, tokens 1..2',
    );
    assert.equal(cache.read({ start: 5 }).k.length, 0);
    cache.free();
  }
});

test('errors: bad newTokens, truncations, reads and length of a ragged cache are precise and change nothing', () => {
  const [, mha] = instances[0];
  const cache = mha.createKVCache({ batch: 3, numKvHeads: 1, headDim: 4, capacity: 6 });
  const step = (n) => [new Float32Array(3 * n * 8), new Float32Array(3 * n * 4), new Float32Array(3 * n * 4)];
  cache.attend(...step(3), { numHeads: 2, newTokens: [3, 1, 0] });
  assert.deepEqual([...cache.lengths], [3, 1, 0]);
  expectError(() => cache.length, RangeError, ['KVCache.length', 'different lengths [3, 1, 0]', 'cache.lengths']);
  const bad = [
    [{ newTokens: 2 }, TypeError, ['KVCache.attend: newTokens', 'batch = 3 integers in [0, n = 2]', 'got 2']],
    [{ newTokens: [1, 1] }, RangeError, ['KVCache.attend: newTokens', 'got 2 entries']],
    [{ newTokens: [1, 3, 0] }, RangeError, ['newTokens: entry 1', 'in [0, 2]', 'got 3']],
    [{ newTokens: [1, -1, 0] }, RangeError, ['newTokens: entry 1', 'got -1']],
    [{ newTokens: [1, 0.5, 0] }, RangeError, ['newTokens: entry 1', 'got 0.5']],
    [{ newTokens: [1, '1', 0] }, TypeError, ['newTokens: entry 1', 'got "1"']],
    [
      { newTokens: [3, 0, 0] },
      RangeError,
      ['KVCache.attend: k: 3 new tokens of sequence 0', 'length 4 + 3 > capacity 6'],
      4,
    ],
  ];
  for (const [options, ErrorClass, fragments, n = 2] of bad) {
    const [q, k, v] = step(n);
    if (n === 4) cache.attend(...step(1), { numHeads: 2, newTokens: [1, 0, 0] }); // sequence 0 at 4
    expectError(() => cache.attend(q, k, v, { numHeads: 2, ...options }), ErrorClass, fragments);
  }
  assert.deepEqual([...cache.lengths], [4, 1, 0]);
  expectError(() => cache.truncate(5), RangeError, ['KVCache.truncate: n', '[0, max(lengths) = 4]', 'got 5']);
  expectError(() => cache.truncate([4, 2, 0]), RangeError, ['KVCache.truncate: n: entry 1', '[0, 1]', 'got 2']);
  expectError(() => cache.truncate([4, 1]), RangeError, ['KVCache.truncate: n', 'got 2 entries']);
  expectError(() => cache.truncate('2'), TypeError, ['KVCache.truncate: n', 'got "2"']);
  expectError(() => cache.read({ end: 1 }), RangeError, ['KVCache.read: end', 'min(lengths) = 0', 'got 1']);
  expectError(() => cache.read({ start: -1 }), RangeError, ['KVCache.read: start', 'got -1']);
  expectError(() => cache.read({ begin: 0 }), TypeError, ['KVCache.read: options', 'begin']);
  assert.deepEqual([...cache.lengths], [4, 1, 0]);
  cache.truncate([2, 1, 0]);
  cache.truncate(1);
  assert.deepEqual([...cache.lengths], [1, 1, 0]);
  cache.truncate(0);
  assert.equal(cache.length, 0);
  cache.free();
  expectError(() => cache.lengths && cache.read(), TypeError, ['KVCache.read', 'freed']);
});

test('memory: 3,000 ragged steps with truncations leave the heap where it started', () => {
  const [, mha] = instances[0];
  const cache = mha.createKVCache({ batch: 3, numKvHeads: 2, headDim: 8, capacity: 64, dtype: 'float16' });
  const random = mulberry32(5);
  const run = (steps) => {
    for (let i = 0; i < steps; i++) {
      const counts = [i % 2, 1, i % 3 === 0 ? 2 : 0];
      const n = 2;
      cache.attend(
        randomNormal(3 * n * 32, random),
        randomNormal(3 * n * 16, random),
        randomNormal(3 * n * 16, random),
        { numHeads: 4, newTokens: counts },
      );
      if (Math.max(...cache.lengths) > 60) cache.truncate([1, 2, 3].map((x, b) => Math.min(x, cache.lengths[b])));
    }
  };
  run(100);
  const before = mha.memoryStats().heapBytesInUse;
  run(3000);
  assert.equal(mha.memoryStats().heapBytesInUse, before);
  cache.free();
});
