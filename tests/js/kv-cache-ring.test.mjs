// Ring caches (docs/spec.md 5.5) through the public API: a ring of capacity C fed 10 C tokens per sequence
// gives on every step what a plain cache holding every token gives with the same window (out and lse within
// float32 rounding; bit for bit before it wraps), for float32, float16 and int8 storage, ragged steps, rope
// at the true positions and sinks; lengths count every token, stored what the ring holds; read, truncate,
// reorder, save and load keep the ring and its positions; the window rule and bad options are precise
// errors that store nothing and leak nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, mulberry32 } from './helpers.mjs';

const mha = await createMHA();
const [B, H, HKV, DH, C, W] = [3, 4, 2, 16, 48, 36];
const random = mulberry32(77);
const rand = (n) => Float32Array.from({ length: n }, () => random() * 2 - 1);
const tables = mha.ropeTables({ rotaryDim: DH, positions: 1024 });
const options = { numHeads: H, window: [W, 0], rope: { cos: tables.cos, sin: tables.sin }, sinks: rand(H) };

/** |a - b| <= 2e-6 + 2e-5 |b| for every element (infinities equal). */
function assertClose(a, b, what) {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++) {
    if (Object.is(a[i], b[i])) continue;
    assert.ok(Math.abs(a[i] - b[i]) <= 2e-6 + 2e-5 * Math.abs(b[i]), `${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
}

/** One step of random tokens: counts per sequence (n = their max). */
function step(counts) {
  const n = Math.max(1, ...counts);
  return { n, q: rand(B * n * H * DH), k: rand(B * n * HKV * DH), v: rand(B * n * HKV * DH), newTokens: counts };
}

for (const dtype of ['float32', 'float16', 'int8']) {
  test(`ring (${dtype}): 10 C tokens equal a plain cache with the same window, every step`, () => {
    const config = { batch: B, numKvHeads: HKV, headDim: DH, dtype };
    const ring = mha.createKVCache({ ...config, capacity: C, ring: true });
    const plain = mha.createKVCache({ ...config, capacity: 12 * C });
    try {
      assert.equal(ring.ring, true);
      assert.equal(plain.ring, false);
      let wrapped = false;
      while (Math.min(...ring.lengths) < 10 * C) {
        const counts = Array.from({ length: B }, () => (random() < 0.2 ? 0 : 1 + Math.floor(random() * (C - W - 1))));
        const s = step(counts);
        const a = ring.attend(s.q, s.k, s.v, { ...options, newTokens: s.newTokens, lse: true });
        const b = plain.attend(s.q, s.k, s.v, { ...options, newTokens: s.newTokens, lse: true });
        wrapped = Math.max(...ring.lengths) > C; // from the first call past the capacity: two runs of slots
        if (!wrapped) {
          assert.ok(bitsEqual(a.out, b.out), `out before the ring wraps, lengths ${ring.lengths}`);
        } else {
          assertClose(a.out, b.out, `out at lengths ${ring.lengths}`);
          assertClose(a.lse, b.lse, `lse at lengths ${ring.lengths}`);
        }
        assert.deepEqual([...ring.lengths], [...plain.lengths]);
        assert.deepEqual(
          [...ring.stored],
          [...ring.lengths].map((L) => Math.min(L, C)),
        );
      }
      // Every sequence at one length: the stored positions read back as the plain cache's.
      const longest = Math.max(...ring.lengths);
      const even = [...ring.lengths].map((L) => longest - L);
      while (even.some((x) => x > 0)) {
        const counts = even.map((x) => Math.min(x, C - W - 1));
        const s = step(counts);
        ring.attend(s.q, s.k, s.v, { ...options, newTokens: counts });
        plain.attend(s.q, s.k, s.v, { ...options, newTokens: counts });
        counts.forEach((x, b) => (even[b] -= x));
      }
      const held = ring.read();
      const all = plain.read({ start: longest - C });
      assert.ok(bitsEqual(held.k, all.k) && bitsEqual(held.v, all.v), 'read of the stored positions');
      expectError(() => ring.read({ start: longest - C - 1 }), RangeError, [
        'KVCache.read: start:',
        `[max(lengths - stored) = ${longest - C}`,
      ]);
      // The ring holds its capacity whatever the stream's length: here about a tenth of the plain cache.
      assert.ok(ring.bytes * 9 < plain.bytes, `${ring.bytes} vs ${plain.bytes}`);
    } finally {
      ring.free();
      plain.free();
    }
  });
}

test('ring: save and load keep the ring and its positions; reorder and truncate move what it stores', () => {
  const ring = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: C, ring: true });
  const loaded = [];
  try {
    for (let i = 0; i < 20; i++) {
      const s = step([5, 4, 7]);
      ring.attend(s.q, s.k, s.v, { ...options, newTokens: s.newTokens });
    }
    const bytes = ring.save();
    loaded.push(mha.loadKVCache(bytes), mha.loadKVCache(bytes, { capacity: 2 * C }));
    for (const copy of loaded) {
      assert.equal(copy.ring, true);
      assert.deepEqual([...copy.lengths], [100, 80, 140]);
      assert.deepEqual([...copy.stored], [C, C, C]);
    }
    // The next step: the same bits from the same-capacity copy, the same attention from the larger one.
    const s = step([1, 1, 1]);
    const want = ring.attend(s.q, s.k, s.v, options);
    assert.ok(bitsEqual(loaded[0].attend(s.q, s.k, s.v, options), want));
    assertClose(loaded[1].attend(s.q, s.k, s.v, options), want, 'out of the copy of capacity 2 C');
    // Beam search on a ring: stored moves with the tokens.
    ring.truncate([101, 70, 141]);
    assert.deepEqual([...ring.stored], [C, C - 11, C]);
    ring.reorder([1, 1, 0]);
    assert.deepEqual([...ring.lengths], [70, 70, 101]);
    assert.deepEqual([...ring.stored], [C - 11, C - 11, C]);
    expectError(() => ring.truncate(40), RangeError, [
      'KVCache.truncate: n: expected at least 53 of sequence 2',
      'nothing was removed',
    ]);
    assert.deepEqual([...ring.lengths], [70, 70, 101]);
  } finally {
    ring.free();
    for (const c of loaded) c.free();
  }
});

test('ring: the window rule, a prefix, and bad options are precise errors; nothing stored, nothing leaked', () => {
  const ring = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: C, ring: true });
  const plain = mha.createKVCache({ batch: 1, numKvHeads: HKV, headDim: DH, capacity: C });
  const ringPrefix = mha.createKVCache({ batch: 1, numKvHeads: HKV, headDim: DH, capacity: C, ring: true });
  try {
    const s = step([1, 1, 1]);
    for (let i = 0; i < 40; i++) ring.attend(s.q, s.k, s.v, options);
    ring.truncate(30); // holds positions [0, 30) of 40 appended... all of them: nothing dropped yet
    for (let i = 0; i < 30; i++) ring.attend(s.q, s.k, s.v, options);
    ring.truncate(50); // positions [12, 50): 38 stored
    const before = mha.memoryStats().heapBytesInUse;
    expectError(() => ring.attend(s.q, s.k, s.v, { numHeads: H }), RangeError, [
      'KVCache.attend: window: a ring cache needs a window [W, ...] with W + n <= capacity (48, n = 1)',
      'got no bound on the left',
    ]);
    expectError(() => ring.attend(s.q, s.k, s.v, { numHeads: H, window: [48, 0] }), RangeError, [
      'KVCache.attend: window:',
      'got W = 48',
    ]);
    expectError(() => ring.attend(s.q, s.k, s.v, { numHeads: H, window: [39, 0] }), RangeError, [
      'KVCache.attend: window: W = 39 would reach positions the ring overwrote',
      'stored[0] = 38 tokens (positions from 12), expected W <= 38',
    ]);
    expectError(() => ring.attend(s.q, s.k, s.v, { numHeads: H, window: [10, 0], prefix: plain }), TypeError, [
      'KVCache.attend: prefix:',
      'this cache is a ring',
    ]);
    const one = step([1]);
    expectError(
      () =>
        plain.attend(one.q.subarray(0, H * DH), one.k.subarray(0, HKV * DH), one.v.subarray(0, HKV * DH), {
          numHeads: H,
          prefix: ringPrefix,
        }),
      TypeError,
      ['prefix:', 'the prefix is a ring'],
    );
    assert.deepEqual([...ring.lengths], [50, 50, 50]);
    assert.equal(plain.length, 0);
    assert.equal(mha.memoryStats().heapBytesInUse, before);
    ring.attend(s.q, s.k, s.v, { numHeads: H, window: [38, 0] });
    assert.deepEqual([...ring.stored], [39, 39, 39]);
    expectError(() => mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 4, capacity: 4, ring: 1 }), TypeError, [
      'createKVCache: ring: expected true or false, got 1',
    ]);
  } finally {
    for (const c of [ring, plain, ringPrefix]) c.free();
  }
});
