// Bad input for the options of docs/spec.md Part 2 (numKvHeads, queryOffset, kvLengths, window, softcap,
// alibiSlopes, bias + biasShape, emptyRows, lse): each is a TypeError or RangeError that names the
// parameter, says what was expected and what was given; the instance keeps working and its wasm heap and
// memory do not grow. Also: the "none" value of each option gives the bits of a call without it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, compare, expectError, heapCopy, loadSpecExample } from './helpers.mjs';

const mha = await createMHA();
const other = await createMHA({ warmup: false });
// The spec example: B = 2, S = T = 5, D = 12, H = 3, Dh = 4.
const { q, k, v, out64, shape } = loadSpecExample();
const attend = (overrides, qq = q, kk = k, vv = v) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });
const weights = (overrides, qq = q, kk = k) => mha.attentionWeights(qq, kk, { ...shape, ...overrides });
// GQA shapes: H = 4 query heads of Dh = 3 over Hkv = 2 KV heads, so k and v are (2, 5, 6).
const gqa = { batch: 2, seqLen: 5, dModel: 12, numHeads: 4, numKvHeads: 2 };
const gqaKv = new Float32Array(2 * 5 * 6);
const bias = new Float32Array(2 * 3 * 5 * 5);
const tensorOf = (instance, length) => instance.allocate(length);
const freed = (() => {
  const t = mha.allocate(150);
  t.free();
  return t;
})();
const foreign = tensorOf(other, 150);
const lseTensor = tensorOf(mha, 30);

/** A Float32Array whose ArrayBuffer has been transferred away (detached): it reads as length 0. */
function detached(TypedArray, length) {
  const array = new TypedArray(length);
  structuredClone(array.buffer, { transfer: [array.buffer] });
  return array;
}

// [description, thunk, error class, message fragments]
export const BAD_OPTIONS = [
  // numKvHeads
  [
    'numKvHeads does not divide numHeads',
    () => attend({ numKvHeads: 2 }),
    RangeError,
    ['numKvHeads', 'divisor of numHeads (3)', 'got 2', '3 % 2 = 1'],
  ],
  [
    'numKvHeads above numHeads',
    () => attend({ numKvHeads: 6 }),
    RangeError,
    ['numKvHeads', 'divisor of numHeads (3)', 'got 6'],
  ],
  ['numKvHeads zero', () => attend({ numKvHeads: 0 }), RangeError, ['numKvHeads', 'positive integer', 'got 0']],
  ['numKvHeads fractional', () => attend({ numKvHeads: 1.5 }), RangeError, ['numKvHeads', 'got 1.5']],
  ['numKvHeads a string', () => attend({ numKvHeads: '1' }), TypeError, ['numKvHeads', '"1"']],
  ['numKvHeads null', () => attend({ numKvHeads: null }), TypeError, ['numKvHeads', 'null']],
  [
    'GQA: k sized for numHeads',
    () => mha.multiHeadAttention(new Float32Array(120), new Float32Array(120), gqaKv, gqa),
    RangeError,
    ['k: expected Float32Array of length 60 (batch*kvSeqLen*numKvHeads*headDim = 2*5*2*3), got length 120'],
  ],
  [
    'GQA: v one short',
    () => mha.multiHeadAttention(new Float32Array(120), gqaKv, gqaKv.subarray(1), gqa),
    RangeError,
    ['v:', 'length 60', 'got length 59'],
  ],
  [
    'GQA weights: k sized for numHeads',
    () => mha.attentionWeights(new Float32Array(120), new Float32Array(120), gqa),
    RangeError,
    ['attentionWeights: k', 'batch*kvSeqLen*numKvHeads*headDim = 2*5*2*3'],
  ],
  // queryOffset
  [
    'queryOffset negative',
    () => attend({ queryOffset: -1 }),
    RangeError,
    ['queryOffset', 'non-negative integer', 'got -1'],
  ],
  ['queryOffset fractional', () => attend({ queryOffset: 0.5 }), RangeError, ['queryOffset', 'got 0.5']],
  ['queryOffset NaN', () => attend({ queryOffset: NaN }), RangeError, ['queryOffset', 'got NaN']],
  ['queryOffset Infinity', () => attend({ queryOffset: Infinity }), RangeError, ['queryOffset', 'got Infinity']],
  [
    'queryOffset + seqLen beyond 2^31',
    () => attend({ queryOffset: 2 ** 31 - 3 }),
    RangeError,
    ['queryOffset', 'queryOffset + seqLen below 2^31', 'got 2147483645'],
  ],
  ['queryOffset a string', () => attend({ queryOffset: '2' }), TypeError, ['queryOffset', '"2"']],
  // kvLengths
  [
    'kvLengths too short',
    () => attend({ kvLengths: [5] }),
    RangeError,
    ['kvLengths', '2 integers in [0, kvSeqLen = 5]', 'one per batch item, batch = 2', 'got length 1'],
  ],
  ['kvLengths too long', () => attend({ kvLengths: new Int32Array(3) }), RangeError, ['kvLengths', 'got length 3']],
  [
    'kvLengths entry above kvSeqLen',
    () => attend({ kvLengths: [5, 6] }),
    RangeError,
    ['kvLengths', 'integers in [0, kvSeqLen = 5]', 'got 6 at index 1'],
  ],
  ['kvLengths entry negative', () => attend({ kvLengths: [-1, 2] }), RangeError, ['kvLengths', 'got -1 at index 0']],
  [
    'kvLengths entry fractional',
    () => attend({ kvLengths: [2, 2.5] }),
    RangeError,
    ['kvLengths', 'got 2.5 at index 1'],
  ],
  ['kvLengths entry a string', () => attend({ kvLengths: [2, '3'] }), TypeError, ['kvLengths', '"3" at index 1']],
  [
    'kvLengths a Uint32Array',
    () => attend({ kvLengths: new Uint32Array(2) }),
    TypeError,
    ['kvLengths', 'Int32Array or number[]', 'Uint32Array(2)'],
  ],
  ['kvLengths a number', () => attend({ kvLengths: 5 }), TypeError, ['kvLengths', 'got 5']],
  ['kvLengths detached', () => attend({ kvLengths: detached(Int32Array, 2) }), TypeError, ['kvLengths', 'detached']],
  [
    'kvLengths a Proxy of an Int32Array',
    () => attend({ kvLengths: new Proxy(new Int32Array(2), {}) }),
    TypeError,
    ['kvLengths', 'Proxy'],
  ],
  // window
  [
    'window with a negative bound',
    () => attend({ window: [2, -1] }),
    RangeError,
    ['window', 'two non-negative integers or Infinity', 'got [2, -1]'],
  ],
  ['window with a fractional bound', () => attend({ window: [1.5, 0] }), RangeError, ['window', 'got [1.5, 0]']],
  ['window with NaN', () => attend({ window: [NaN, 0] }), RangeError, ['window', 'got [NaN, 0]']],
  ['window with -Infinity', () => attend({ window: [-Infinity, 0] }), RangeError, ['window', 'got [-Infinity, 0]']],
  ['window of one bound', () => attend({ window: [3] }), RangeError, ['window', '[left, right]', 'got [3]']],
  ['window of three bounds', () => attend({ window: [1, 2, 3] }), RangeError, ['window', 'got [1, 2, 3]']],
  ['window a number', () => attend({ window: 4 }), TypeError, ['window', '[left, right]', 'got 4']],
  [
    'window with a string bound',
    () => attend({ window: [1, 'Infinity'] }),
    TypeError,
    ['window', 'got [1, "Infinity"]'],
  ],
  ['window a Int32Array', () => attend({ window: new Int32Array(2) }), TypeError, ['window', 'Int32Array(2)']],
  // softcap
  ['softcap zero', () => attend({ softcap: 0 }), RangeError, ['softcap', 'finite number > 0', 'got 0']],
  ['softcap negative', () => attend({ softcap: -30 }), RangeError, ['softcap', 'got -30']],
  ['softcap Infinity', () => attend({ softcap: Infinity }), RangeError, ['softcap', 'got Infinity']],
  ['softcap NaN', () => attend({ softcap: NaN }), RangeError, ['softcap', 'got NaN']],
  ['softcap below float32', () => attend({ softcap: 1e-50 }), RangeError, ['softcap', 'float32 range', 'got 1e-50']],
  ['softcap a string', () => attend({ softcap: '30' }), TypeError, ['softcap', '"30"']],
  // alibiSlopes
  [
    'alibiSlopes too short',
    () => attend({ alibiSlopes: [0.5, 0.25] }),
    RangeError,
    ['alibiSlopes', '3 finite numbers', 'one per query head, numHeads = 3', 'got length 2'],
  ],
  [
    'alibiSlopes too long',
    () => attend({ alibiSlopes: new Float32Array(4) }),
    RangeError,
    ['alibiSlopes', 'got length 4'],
  ],
  [
    'alibiSlopes with NaN',
    () => attend({ alibiSlopes: [0.5, NaN, 0.25] }),
    RangeError,
    ['alibiSlopes', 'finite numbers', 'got NaN at index 1'],
  ],
  [
    'alibiSlopes with Infinity',
    () => attend({ alibiSlopes: new Float32Array([0.5, 0.25, Infinity]) }),
    RangeError,
    ['alibiSlopes', 'got Infinity at index 2'],
  ],
  [
    'alibiSlopes beyond float32',
    () => attend({ alibiSlopes: [1e39, 0, 0] }),
    RangeError,
    ['alibiSlopes', 'got 1e+39 at index 0 (beyond float32)'],
  ],
  [
    'alibiSlopes with a string',
    () => attend({ alibiSlopes: [0.5, '1', 0] }),
    TypeError,
    ['alibiSlopes', '"1" at index 1'],
  ],
  [
    'alibiSlopes a Float64Array',
    () => attend({ alibiSlopes: new Float64Array(3) }),
    TypeError,
    ['alibiSlopes', 'Float32Array or number[]', 'Float64Array(3)'],
  ],
  // bias, biasShape
  [
    'bias wrong length (default shape)',
    () => attend({ bias: new Float32Array(50) }),
    RangeError,
    ['bias: expected Float32Array of length 150 (biasShape [2, 3, 5, 5] = 2*3*5*5)', 'got length 50'],
  ],
  [
    'bias wrong length for biasShape',
    () => attend({ bias: new Float32Array(50), biasShape: [1, 1, 5, 5] }),
    RangeError,
    ['bias', 'length 25', 'biasShape [1, 1, 5, 5] = 1*1*5*5', 'got length 50'],
  ],
  [
    'bias a Float64Array',
    () => attend({ bias: new Float64Array(150) }),
    TypeError,
    ['bias', 'Float64Array(150)', 'or a HeapTensor of that length'],
  ],
  ['bias a plain Array', () => attend({ bias: new Array(150).fill(0) }), TypeError, ['bias', 'Array(150)']],
  ['bias detached', () => attend({ bias: detached(Float32Array, 150) }), TypeError, ['bias', 'detached']],
  ['bias a freed HeapTensor', () => attend({ bias: freed }), TypeError, ['bias', 'freed']],
  [
    'bias a HeapTensor of another instance',
    () => attend({ bias: foreign }),
    TypeError,
    ['bias', 'another mha-wasm instance'],
  ],
  [
    'bias a HeapTensor of the wrong length',
    () => attend({ bias: lseTensor }),
    RangeError,
    ['bias', 'HeapTensor of length 150', 'got length 30'],
  ],
  [
    'biasShape without bias',
    () => attend({ biasShape: [1, 1, 5, 5] }),
    TypeError,
    ['biasShape', 'only together with bias', 'got biasShape [1, 1, 5, 5] without bias'],
  ],
  [
    'biasShape batch neither 1 nor batch',
    () => attend({ bias, biasShape: [3, 3, 5, 5] }),
    RangeError,
    ['biasShape', '[1 or batch (2), 1 or numHeads (3), seqLen (5), kvSeqLen (5)]', 'got [3, 3, 5, 5]'],
  ],
  [
    'biasShape heads neither 1 nor numHeads',
    () => attend({ bias, biasShape: [2, 2, 5, 5] }),
    RangeError,
    ['biasShape', 'got [2, 2, 5, 5]'],
  ],
  [
    'biasShape seqLen wrong',
    () => attend({ bias, biasShape: [2, 3, 1, 5] }),
    RangeError,
    ['biasShape', 'seqLen (5)', 'got [2, 3, 1, 5]'],
  ],
  [
    'biasShape kvSeqLen broadcast',
    () => attend({ bias, biasShape: [2, 3, 5, 1] }),
    RangeError,
    ['biasShape', 'kvSeqLen (5)', 'got [2, 3, 5, 1]'],
  ],
  [
    'biasShape of three dims',
    () => attend({ bias, biasShape: [2, 3, 25] }),
    RangeError,
    ['biasShape', 'got [2, 3, 25]'],
  ],
  [
    'biasShape with a string',
    () => attend({ bias, biasShape: [2, '3', 5, 5] }),
    TypeError,
    ['biasShape', 'got [2, "3", 5, 5]'],
  ],
  ['biasShape a string', () => attend({ bias, biasShape: '2,3,5,5' }), TypeError, ['biasShape', '"2,3,5,5"']],
  // emptyRows
  [
    'emptyRows another string',
    () => attend({ emptyRows: 'zeros' }),
    RangeError,
    ['emptyRows', "'nan' or 'zero'", '"zeros"'],
  ],
  ['emptyRows NaN', () => attend({ emptyRows: NaN }), TypeError, ['emptyRows', "'nan' or 'zero'", 'got NaN']],
  ['emptyRows a boolean', () => attend({ emptyRows: true }), TypeError, ['emptyRows', 'got true']],
  // lse
  [
    'lse wrong length',
    () => attend({ lse: new Float32Array(31) }),
    RangeError,
    ['lse: expected Float32Array of length 30 (batch*numHeads*seqLen = 2*3*5)', 'got length 31'],
  ],
  ['lse a Float64Array', () => attend({ lse: new Float64Array(30) }), TypeError, ['lse', 'Float64Array(30)']],
  ['lse detached', () => attend({ lse: detached(Float32Array, 30) }), TypeError, ['lse', 'detached']],
  ['lse a freed HeapTensor', () => attend({ lse: freed }), TypeError, ['lse', 'freed']],
  [
    'lse a HeapTensor of another instance',
    () => attend({ lse: tensorOf(other, 30) }),
    TypeError,
    ['lse', 'another mha-wasm instance'],
  ],
  [
    'lse overlapping out',
    () => {
      const both = new Float32Array(150);
      return attend({ out: both.subarray(0, 120), lse: both.subarray(110, 140) });
    },
    TypeError,
    ['lse', 'does not overlap out'],
  ],
  [
    'lse the same tensor as out',
    () => {
      const t = mha.allocate(120);
      return mha.multiHeadAttention(q, k, v, { ...shape, numHeads: 12, dModel: 12, out: t, lse: t });
    },
    TypeError,
    ['lse', 'HeapTensor other than out', 'got out itself'],
  ],
  [
    'lse the same tensor as q',
    () => {
      const t = heapCopy(mha, q);
      return mha.multiHeadAttention(t, k, v, { ...shape, numHeads: 12, lse: t });
    },
    TypeError,
    ['lse', 'HeapTensor other than q'],
  ],
  // (1, 5, 5, 20, 4): out (1, 5, 20) and a bias [1, 4, 5, 5] both have 100 elements.
  [
    'out the same tensor as bias',
    () => {
      const x = new Float32Array(100);
      const t = mha.allocate(100);
      return mha.multiHeadAttention(x, x, x, {
        batch: 1,
        seqLen: 5,
        dModel: 20,
        numHeads: 4,
        bias: t,
        biasShape: [1, 4, 5, 5],
        out: t,
      });
    },
    TypeError,
    ['out: expected a HeapTensor other than bias', 'got bias itself'],
  ],
  // attentionWeights takes every option but out and lse
  [
    'weights: lse refused',
    () => weights({ lse: new Float32Array(30) }),
    TypeError,
    ['attentionWeights: options: unknown option "lse"', 'outputs of multiHeadAttention'],
  ],
  [
    'weights: out refused',
    () => weights({ out: new Float32Array(150) }),
    TypeError,
    ['attentionWeights: options: unknown option "out"'],
  ],
  [
    'weights: numKvHeads does not divide',
    () => weights({ numKvHeads: 2 }),
    RangeError,
    ['attentionWeights: numKvHeads', 'divisor of numHeads (3)'],
  ],
  [
    'weights: queryOffset negative',
    () => weights({ queryOffset: -2 }),
    RangeError,
    ['attentionWeights: queryOffset', 'got -2'],
  ],
  [
    'weights: kvLengths entry too large',
    () => weights({ kvLengths: [9, 1] }),
    RangeError,
    ['attentionWeights: kvLengths', 'got 9 at index 0'],
  ],
  [
    'weights: window negative',
    () => weights({ window: [-1, 0] }),
    RangeError,
    ['attentionWeights: window', 'got [-1, 0]'],
  ],
  ['weights: softcap zero', () => weights({ softcap: 0 }), RangeError, ['attentionWeights: softcap', 'got 0']],
  [
    'weights: alibiSlopes short',
    () => weights({ alibiSlopes: [1] }),
    RangeError,
    ['attentionWeights: alibiSlopes', 'got length 1'],
  ],
  [
    'weights: bias wrong length',
    () => weights({ bias: new Float32Array(3) }),
    RangeError,
    ['attentionWeights: bias', 'length 150', 'got length 3'],
  ],
  [
    'weights: biasShape without bias',
    () => weights({ biasShape: [2, 3, 5, 5] }),
    TypeError,
    ['attentionWeights: biasShape', 'without bias'],
  ],
  [
    'weights: emptyRows unknown',
    () => weights({ emptyRows: 'none' }),
    RangeError,
    ['attentionWeights: emptyRows', '"none"'],
  ],
  ['weights: unknown option (typo)', () => weights({ numKVHeads: 1 }), TypeError, ['unknown option "numKVHeads"']],
];

for (const [description, thunk, ErrorClass, fragments] of BAD_OPTIONS) {
  test(`bad option: ${description} -> ${ErrorClass.name}`, () => expectError(thunk, ErrorClass, fragments));
}

test('after every bad option the instance gives the golden answer, and its wasm heap and memory have not grown', () => {
  for (const [, thunk] of BAD_OPTIONS) assert.throws(thunk); // the tensors some cases allocate now exist
  const before = mha.memoryStats();
  for (let round = 0; round < 3; round++) {
    for (const [description, thunk] of BAD_OPTIONS) {
      if (/the same tensor|overlapping|as bias/.test(description)) continue; // they allocate their tensors
      assert.throws(thunk);
      const r = compare(mha.multiHeadAttention(q, k, v, shape), out64);
      assert.ok(r.maxError < 1e-5, `max error ${r.maxError} after "${description}"`);
    }
  }
  assert.deepEqual(mha.memoryStats(), before, 'bad calls changed the heap');
});

test("an option's getter that frees the bias or lse tensor during validation is caught before the heap is touched", () => {
  for (const name of ['bias', 'lse']) {
    const tensor = mha.allocate(name === 'bias' ? 150 : 30);
    const options = { ...shape, [name]: tensor };
    // emptyRows is read after bias; out and lse after every option but each other.
    Object.defineProperty(options, 'emptyRows', {
      enumerable: true,
      get: () => {
        tensor.free();
        return undefined;
      },
    });
    expectError(() => mha.multiHeadAttention(q, k, v, options), TypeError, [`${name}: the HeapTensor was freed`]);
  }
});

test('the "none" value of every option gives the bits of a call without it', () => {
  const plain = attend({});
  const causal = attend({ causal: true });
  for (const none of [
    { numKvHeads: 3 },
    { queryOffset: 0 },
    { window: [Infinity, Infinity] },
    { window: [2 ** 40, Infinity] },
    { emptyRows: 'nan' },
  ]) {
    assert.ok(bitsEqual(attend(none), plain), JSON.stringify(none));
    assert.ok(bitsEqual(attend({ ...none, causal: true }), causal), `${JSON.stringify(none)} with causal`);
  }
  const w = weights({});
  assert.ok(bitsEqual(weights({ numKvHeads: 3, queryOffset: 0, window: [Infinity, Infinity], emptyRows: 'nan' }), w));
});
