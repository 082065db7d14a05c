// cache.reorder (docs/spec.md 5.4): beam search through the public API. After reorder(indices) every
// sequence reads back and attends exactly as the sequence it was taken from; bad indices change nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, mulberry32 } from './helpers.mjs';

const mha = await createMHA();
const [B, H, HKV, DH] = [4, 4, 2, 8];
const random = mulberry32(41);
const rand = (n) => Float32Array.from({ length: n }, () => random() * 2 - 1);
const rowsOf = (x, n, width, b) => x.slice(b * n * width, (b + 1) * n * width);

for (const dtype of ['float32', 'float16', 'int8']) {
  test(`reorder (${dtype}): every sequence then reads and attends as the one it was taken from`, () => {
    const cache = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: 64, dtype });
    const singles = [];
    try {
      // Ragged prompts, each also in a cache of its own.
      const n = 20;
      const newTokens = [20, 7, 13, 1];
      const [q, k, v] = [rand(B * n * H * DH), rand(B * n * HKV * DH), rand(B * n * HKV * DH)];
      cache.attend(q, k, v, { numHeads: H, newTokens });
      for (let b = 0; b < B; b++) {
        const single = mha.createKVCache({ batch: 1, numKvHeads: HKV, headDim: DH, capacity: 64, dtype });
        singles.push(single);
        const take = (x, width) => rowsOf(x, n, width, b).slice(0, newTokens[b] * width);
        single.attend(take(q, H * DH), take(k, HKV * DH), take(v, HKV * DH), { numHeads: H });
      }
      let beams = singles;
      for (const indices of [
        [1, 0, 3, 2],
        [0, 0, 2, 2],
        [3, 1, 2, 0],
      ]) {
        cache.reorder(indices);
        // The beams as separate caches: a copy (save and load) of the one each position takes.
        const next = indices.map((i) => mha.loadKVCache(beams[i].save()));
        beams.forEach((s) => s.free());
        beams = next;
        assert.deepEqual(
          [...cache.lengths],
          beams.map((s) => s.length),
        );
        // One decode step: sequence b equals its beam's own cache, bit for bit.
        const [qs, ks, vs] = [rand(B * H * DH), rand(B * HKV * DH), rand(B * HKV * DH)];
        const out = cache.attend(qs, ks, vs, { numHeads: H });
        for (let b = 0; b < B; b++) {
          const own = beams[b].attend(
            rowsOf(qs, 1, H * DH, b),
            rowsOf(ks, 1, HKV * DH, b),
            rowsOf(vs, 1, HKV * DH, b),
            {
              numHeads: H,
            },
          );
          assert.ok(bitsEqual(rowsOf(out, 1, H * DH, b), own), `step after ${indices}: sequence ${b}`);
        }
      }
      singles.length = 0;
      singles.push(...beams);
    } finally {
      cache.free();
      singles.forEach((s) => s.free());
    }
  });
}

test('reorder: a wrong length, a non-integer or an index out of range changes nothing', () => {
  const cache = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: 8 });
  try {
    cache.attend(rand(B * 2 * H * DH), rand(B * 2 * HKV * DH), rand(B * 2 * HKV * DH), {
      numHeads: H,
      newTokens: [2, 1, 0, 2],
    });
    const saved = cache.save();
    expectError(() => cache.reorder([0, 1, 2]), RangeError, [
      'KVCache.reorder: indices: expected batch = 4 integers in [0, 3]',
      'got 3 entries',
    ]);
    expectError(() => cache.reorder([0, 1, 2, 4]), RangeError, ['KVCache.reorder: indices: entry 3', 'got 4']);
    expectError(() => cache.reorder([0, 1.5, 2, 3]), RangeError, ['entry 1', 'got 1.5']);
    expectError(() => cache.reorder([0, 1, '2', 3]), TypeError, ['entry 2', '"2"']);
    expectError(() => cache.reorder(3), TypeError, ['KVCache.reorder: indices', 'got 3']);
    assert.deepEqual(cache.save(), saved);
    cache.reorder(Int32Array.of(3, 3, 0, 1));
    assert.deepEqual([...cache.lengths], [2, 2, 2, 1]);
  } finally {
    cache.free();
  }
  expectError(() => cache.reorder([0, 1, 2, 3]), TypeError, ['KVCache.reorder', 'freed']);
});
