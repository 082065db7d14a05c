// Bad input: each case must throw the right class, name the parameter, and leave the instance working.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { compare, expectError, loadSpecExample } from './helpers.mjs';

const mha = await createMHA();
const { q, k, v, out64, shape } = loadSpecExample();
const attend = (overrides, qq = q, kk = k, vv = v) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });

// 2 GiB each (never touched, so never resident): q and one array as both k and v need 4 GiB of staging,
// more than the 4 GiB wasm memory can hold (the result is written over the staged q).
const hugeQ = new Float32Array(2 ** 29);
const hugeKV = new Float32Array(2 ** 29);

// [description, thunk, error class, fragments the message must contain]
export const BAD_INPUTS = [
  [
    'q is not a typed array',
    () => mha.multiHeadAttention([1, 2, 3], k, v, shape),
    TypeError,
    ['q:', 'Float32Array of length 120', 'Array(3)'],
  ],
  ['q is a Float64Array', () => attend({}, new Float64Array(120)), TypeError, ['q:', 'Float64Array(120)']],
  [
    'k one element short',
    () => attend({}, q, k.subarray(1)),
    RangeError,
    ['k: expected Float32Array of length 120 (batch*kvSeqLen*dModel = 2*5*12), got length 119'],
  ],
  ['v missing', () => mha.multiHeadAttention(q, k, undefined, shape), TypeError, ['v:', 'undefined']],
  ['options missing', () => mha.multiHeadAttention(q, k, v), TypeError, ['options', 'undefined']],
  ['options is null', () => mha.multiHeadAttention(q, k, v, null), TypeError, ['options', 'null']],
  ['batch missing', () => attend({ batch: undefined }), TypeError, ['batch', 'positive integer', 'undefined']],
  ['batch is a string', () => attend({ batch: '2' }), TypeError, ['batch', '"2"']],
  ['batch is zero', () => attend({ batch: 0 }), RangeError, ['batch', 'positive integer', 'got 0']],
  ['seqLen negative', () => attend({ seqLen: -5 }), RangeError, ['seqLen', 'got -5']],
  ['seqLen fractional', () => attend({ seqLen: 2.5 }), RangeError, ['seqLen', 'got 2.5']],
  ['dModel NaN', () => attend({ dModel: NaN }), RangeError, ['dModel', 'got NaN']],
  ['numHeads Infinity', () => attend({ numHeads: Infinity }), RangeError, ['numHeads', 'got Infinity']],
  [
    'dModel not divisible by numHeads',
    () => attend({ numHeads: 5 }),
    RangeError,
    ['dModel', 'multiple of numHeads (5)', 'got 12'],
  ],
  ['kvSeqLen zero', () => attend({ kvSeqLen: 0 }), RangeError, ['kvSeqLen', 'got 0']],
  ['kvSeqLen does not match k', () => attend({ kvSeqLen: 6 }), RangeError, ['k:', 'length 144', 'got length 120']],
  ['mask wrong length', () => attend({ mask: new Uint8Array(49) }), RangeError, ['mask', 'length 50', 'got length 49']],
  [
    'mask wrong type',
    () => attend({ mask: new Float32Array(50) }),
    TypeError,
    ['mask', 'Uint8Array or boolean[]', 'Float32Array(50)'],
  ],
  ['mask array of numbers', () => attend({ mask: new Array(50).fill(1) }), TypeError, ['mask', 'boolean', 'index 0']],
  ['causal not boolean', () => attend({ causal: 'yes' }), TypeError, ['causal', 'boolean', '"yes"']],
  ['scale NaN', () => attend({ scale: NaN }), RangeError, ['scale', 'finite', 'NaN']],
  ['scale Infinity', () => attend({ scale: -Infinity }), RangeError, ['scale', 'finite', '-Infinity']],
  ['scale a string', () => attend({ scale: '0.5' }), TypeError, ['scale', '"0.5"']],
  [
    'out wrong length',
    () => attend({ out: new Float32Array(10) }),
    RangeError,
    ['out:', 'length 120', 'got length 10'],
  ],
  ['unknown option (typo)', () => attend({ numheads: 3 }), TypeError, ['unknown option "numheads"']],
  [
    'shape beyond 2^31 elements',
    () => attend({ batch: 65536, seqLen: 65536, dModel: 12 }),
    RangeError,
    ['too large', 'batch*seqLen*dModel'],
  ],
  [
    'splitHeads wrong length',
    () => mha.splitHeads(q.subarray(0, 100), shape),
    RangeError,
    ['splitHeads: x', 'length 120', 'got length 100'],
  ],
  [
    'splitHeads extra option',
    () => mha.splitHeads(q, { ...shape, kvSeqLen: 5 }),
    TypeError,
    ['splitHeads', 'unknown option "kvSeqLen"'],
  ],
  ['mergeHeads not a Float32Array', () => mha.mergeHeads('x', shape), TypeError, ['mergeHeads: xh', '"x"']],
  [
    'attentionWeights k short',
    () => mha.attentionWeights(q, k.subarray(0, 12), shape),
    RangeError,
    ['attentionWeights: k', 'got length 12'],
  ],
  [
    'attentionWeights weights beyond 2^31',
    () =>
      mha.attentionWeights(new Float32Array(2 * 2 ** 14 * 4), new Float32Array(2 * 2 ** 14 * 4), {
        batch: 2,
        seqLen: 2 ** 14,
        dModel: 4,
        numHeads: 4,
      }),
    RangeError,
    ['too large', 'batch*numHeads*seqLen*kvSeqLen'],
  ],
  [
    'inputs that do not fit in wasm memory',
    () =>
      mha.multiHeadAttention(hugeQ, hugeKV, hugeKV, {
        batch: 1,
        seqLen: 2 ** 22,
        kvSeqLen: 2 ** 22,
        dModel: 128,
        numHeads: 2,
      }),
    RangeError,
    ['bytes of wasm memory', 'the instance can still have', 'its heap may grow to 4294901760 bytes'],
  ],
];

for (const [description, thunk, ErrorClass, fragments] of BAD_INPUTS) {
  test(`bad input: ${description} -> ${ErrorClass.name}`, () => expectError(thunk, ErrorClass, fragments));
}

test('createMHA rejects bad options', async () => {
  await assert.rejects(createMHA({ threads: 0 }), (e) => e instanceof RangeError && e.message.includes('threads'));
  await assert.rejects(createMHA({ threads: '4' }), (e) => e instanceof TypeError && e.message.includes('threads'));
  await assert.rejects(
    createMHA({ thread: 2 }),
    (e) => e instanceof TypeError && e.message.includes('unknown option "thread"'),
  );
  await assert.rejects(
    createMHA({ warmup: 'yes' }),
    (e) => e instanceof TypeError && e.message.includes('warmup: expected a boolean, got "yes"'),
  );
});

test('after every bad input the instance still gives the golden answer', () => {
  for (const [, thunk] of BAD_INPUTS) {
    assert.throws(thunk);
    const r = compare(mha.multiHeadAttention(q, k, v, shape), out64);
    assert.ok(r.maxError < 1e-5, `max error ${r.maxError} after a bad call`);
  }
});

test('createMHA({ warmup: false }) resolves without warming and computes the same result', async () => {
  const cold = await createMHA({ warmup: false });
  assert.deepEqual(cold.multiHeadAttention(q, k, v, shape), mha.multiHeadAttention(q, k, v, shape));
});

test('scale 0 and negative scale are allowed: 0 gives the mean of V', () => {
  const out = attend({ scale: 0 });
  for (let b = 0; b < 2; b++)
    for (let d = 0; d < 12; d++) {
      let mean = 0;
      for (let j = 0; j < 5; j++) mean += v[(b * 5 + j) * 12 + d] / 5;
      for (let i = 0; i < 5; i++) assert.ok(Math.abs(out[(b * 5 + i) * 12 + d] - mean) < 1e-6);
    }
  assert.ok(attend({ scale: -1 }).every(Number.isFinite));
});

test('splitHeads/mergeHeads take sequences whose seqLen^2 passes 2^31 (no (S, T) tensor), and still check B*S*D', () => {
  const shape = { batch: 1, seqLen: 50000, dModel: 4, numHeads: 2 }; // batch*seqLen*seqLen = 2.5e9
  const x = Float32Array.from({ length: 50000 * 4 }, (_, i) => Math.sin(i));
  const xh = mha.splitHeads(x, shape);
  assert.equal(xh[1 * 50000 * 2 + 3 * 2 + 1], x[3 * 4 + 1 * 2 + 1]); // xh[0, 1, 3, 1] = x[0, 3, 1*2 + 1]
  assert.deepEqual(mha.mergeHeads(xh, shape), x);
  assert.throws(
    () => mha.splitHeads(new Float32Array(0), { batch: 2 ** 16, seqLen: 2 ** 16, dModel: 1, numHeads: 1 }),
    (e) => e instanceof RangeError && e.message.includes('batch*seqLen*dModel'),
  );
});

test('seqLen*kvSeqLen beyond 2^31 without a mask runs: the kernel never forms an (S, T) tensor', () => {
  // 46341^2 > 2^31; causal halves the work (about 1.07e9 query-key pairs, a few seconds).
  const S = 46341;
  const shape = { batch: 1, seqLen: S, dModel: 2, numHeads: 2, causal: true };
  const x = Float32Array.from({ length: S * 2 }, (_, i) => Math.sin(i * 0.7));
  const out = mha.multiHeadAttention(x, x, x, shape);
  // Each head is Dh = 1: row i's output for head h is sum_j w_j x[j, h] over keys j <= i.
  for (const row of [0, 1, 12345, S - 1]) {
    for (let h = 0; h < 2; h++) {
      const qi = x[row * 2 + h];
      let max = -Infinity;
      for (let j = 0; j <= row; j++) max = Math.max(max, qi * x[j * 2 + h]);
      let num = 0,
        den = 0;
      for (let j = 0; j <= row; j++) {
        const w = Math.exp(qi * x[j * 2 + h] - max);
        num += w * x[j * 2 + h];
        den += w;
      }
      assert.ok(
        Math.abs(out[row * 2 + h] - num / den) <= 1e-5,
        `row ${row} head ${h}: ${out[row * 2 + h]} vs ${num / den}`,
      );
    }
  }
});
