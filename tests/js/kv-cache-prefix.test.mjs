// A shared prefix (docs/spec.md 5.2) through the public API: samples of one prompt over a batch-1 prefix cache
// attend as a cache holding a copy of the prompt in every sequence (out and lse within float32 rounding), for
// float32, float16 and int8 storage, with rope at the true positions, sinks, a window, GQA and ragged steps;
// the prefix is never written; mergeAttention of the prefix's and the sequences' own states is the call; and
// a prefix that does not match is a TypeError naming `prefix`, with nothing stored and nothing leaked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, mulberry32 } from './helpers.mjs';

const mha = await createMHA();
const [B, H, HKV, DH, LP] = [3, 4, 2, 16, 37];
const random = mulberry32(53);
const rand = (n) => Float32Array.from({ length: n }, () => random() * 2 - 1);
const tables = mha.ropeTables({ rotaryDim: DH, positions: 256 });
const rope = { cos: tables.cos, sin: tables.sin };
const repeat = (x, times) => {
  const out = new Float32Array(x.length * times);
  for (let t = 0; t < times; t++) out.set(x, t * x.length);
  return out;
};

/** |a - b| <= 2e-6 + 2e-5 |b| for every element (NaN where both are NaN, infinities equal). */
function assertClose(a, b, what) {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++) {
    if (Object.is(a[i], b[i])) continue;
    assert.ok(Math.abs(a[i] - b[i]) <= 2e-6 + 2e-5 * Math.abs(b[i]), `${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
}

for (const dtype of ['float32', 'float16', 'int8']) {
  test(`prefix (${dtype}): samples over a shared prompt attend as copies of it, out and lse`, () => {
    const config = { numKvHeads: HKV, headDim: DH, dtype };
    const prefix = mha.createKVCache({ ...config, batch: 1, capacity: 64 });
    const samples = mha.createKVCache({ ...config, batch: B, capacity: 64 });
    const copies = mha.createKVCache({ ...config, batch: B, capacity: 128 });
    try {
      const options = { numHeads: H, rope, sinks: new Float32Array([0.5, -1, 2, 0]), window: [40, 0] };
      const [q, k, v] = [rand(LP * H * DH), rand(LP * HKV * DH), rand(LP * HKV * DH)];
      prefix.attend(q, k, v, options);
      copies.attend(repeat(q, B), repeat(k, B), repeat(v, B), options);
      const saved = prefix.save();
      // A prefill over the prefix (a next turn), then ragged decode steps.
      for (const [n, newTokens] of [
        [5, [5, 2, 0]],
        [1, undefined],
        [1, [1, 0, 1]],
        [3, [1, 3, 2]],
        [1, undefined],
      ]) {
        const [qs, ks, vs] = [rand(B * n * H * DH), rand(B * n * HKV * DH), rand(B * n * HKV * DH)];
        const step = { ...options, newTokens, lse: true };
        const got = samples.attend(qs, ks, vs, { ...step, prefix });
        const want = copies.attend(qs, ks, vs, step);
        assertClose(got.out, want.out, `out after lengths ${samples.lengths}`);
        assertClose(got.lse, want.lse, `lse after lengths ${samples.lengths}`);
        assert.deepEqual(
          [...samples.lengths].map((x) => x + LP),
          [...copies.lengths],
        );
      }
      assert.equal(prefix.length, LP);
      assert.ok(bitsEqual(prefix.save(), saved), 'the prefix was written');
    } finally {
      for (const c of [prefix, samples, copies]) c.free();
    }
  });
}

test('prefix: the prefix pass and the own pass are attention states that mergeAttention combines into the call', () => {
  const config = { numKvHeads: HKV, headDim: DH };
  const prefix = mha.createKVCache({ ...config, batch: 1, capacity: 64 });
  const samples = mha.createKVCache({ ...config, batch: B, capacity: 64 });
  const own = mha.createKVCache({ ...config, batch: B, capacity: 64 });
  try {
    const [q, k, v] = [rand(LP * H * DH), rand(LP * HKV * DH), rand(LP * HKV * DH)];
    prefix.attend(q, k, v, { numHeads: H });
    const [qs, ks, vs] = [rand(B * H * DH), rand(B * HKV * DH), rand(B * HKV * DH)];
    const whole = samples.attend(qs, ks, vs, { numHeads: H, prefix, lse: true });
    // The sequences' own keys alone (queries at position 0 of their own, the causal rule the same), and the
    // prefix's keys through the stateless call with each query after all of them.
    const ownPart = own.attend(qs, ks, vs, { numHeads: H, lse: true });
    const kPrefix = repeat(prefix.read().k, B);
    const vPrefix = repeat(prefix.read().v, B);
    const prefixLse = new Float32Array(B * H);
    const prefixOut = mha.multiHeadAttention(qs, kPrefix, vPrefix, {
      batch: B,
      seqLen: 1,
      kvSeqLen: LP,
      dModel: H * DH,
      numHeads: H,
      numKvHeads: HKV,
      lse: prefixLse,
    });
    const prefixPart = { out: prefixOut, lse: prefixLse };
    const merged = mha.mergeAttention([prefixPart, ownPart], { batch: B, seqLen: 1, numHeads: H });
    assertClose(whole.out, merged.out, 'out');
    assertClose(whole.lse, merged.lse, 'lse');
  } finally {
    for (const c of [prefix, samples, own]) c.free();
  }
});

test('prefix: one that does not match is a TypeError naming prefix; nothing stored, nothing leaked', async () => {
  const config = { numKvHeads: HKV, headDim: DH, capacity: 64 };
  const cache = mha.createKVCache({ ...config, batch: B });
  const other = await createMHA();
  const bad = {
    'a batch of 2': mha.createKVCache({ ...config, batch: 2 }),
    'numKvHeads 1': mha.createKVCache({ ...config, batch: 1, numKvHeads: 1 }),
    'headDim 8': mha.createKVCache({ ...config, batch: 1, headDim: 8 }),
    'vHeadDim 8': mha.createKVCache({ ...config, batch: 1, vHeadDim: 8 }),
    "dtype 'float16'": mha.createKVCache({ ...config, batch: 1, dtype: 'float16' }),
    'another instance': other.createKVCache({ ...config, batch: 1 }),
  };
  const freed = mha.createKVCache({ ...config, batch: 1 });
  freed.free();
  bad.long = mha.createKVCache({ ...config, batch: 1 });
  bad.long.attend(rand(60 * H * DH), rand(60 * HKV * DH), rand(60 * HKV * DH), { numHeads: H });
  const before = mha.memoryStats().heapBytesInUse;
  const [qs, ks, vs] = [rand(B * H * DH), rand(B * HKV * DH), rand(B * HKV * DH)];
  const attend = (prefix) => () => cache.attend(qs, ks, vs, { numHeads: H, prefix });
  try {
    expectError(attend(bad['a batch of 2']), TypeError, ['KVCache.attend: prefix:', 'batch 1', 'got one with batch 2']);
    expectError(attend(bad['numKvHeads 1']), TypeError, ['KVCache.attend: prefix:', 'numKvHeads 2', 'got 1']);
    expectError(attend(bad['headDim 8']), TypeError, ['KVCache.attend: prefix:', 'headDim 16', 'got 8']);
    expectError(attend(bad['vHeadDim 8']), TypeError, ['KVCache.attend: prefix:', 'vHeadDim 16', 'got 8']);
    expectError(attend(bad["dtype 'float16'"]), TypeError, ['prefix:', 'dtype "float32"', 'got "float16"']);
    expectError(attend(bad['another instance']), TypeError, ['prefix:', 'of another instance']);
    expectError(attend(freed), TypeError, ['prefix:', 'freed by free()']);
    expectError(attend(cache), TypeError, ['prefix:', 'the cache itself']);
    expectError(attend({ length: 3 }), TypeError, ['prefix:', 'expected another KVCache', 'got Object']);
    // Rope tables too short for the positions after the prefix: a RangeError that counts the prefix.
    const long = bad.long;
    const short = mha.ropeTables({ rotaryDim: DH, positions: 60 });
    expectError(
      () => cache.attend(qs, ks, vs, { numHeads: H, prefix: long, rope: { cos: short.cos, sin: short.sin } }),
      RangeError,
      [
        'KVCache.attend: rope: position 60',
        'prefix length + lengths[0] + n - 1 = 60 + 0 + 1 - 1',
        'nothing was stored',
      ],
    );
    assert.deepEqual([...cache.lengths], [0, 0, 0]);
    assert.equal(mha.memoryStats().heapBytesInUse, before);
    // The cache still works, over a good prefix.
    const good = mha.createKVCache({ ...config, batch: 1 });
    bad.good = good;
    cache.attend(qs, ks, vs, { numHeads: H, prefix: good });
    assert.deepEqual([...cache.lengths], [1, 1, 1]);
  } finally {
    cache.free();
    for (const c of Object.values(bad)) c.free();
  }
});
