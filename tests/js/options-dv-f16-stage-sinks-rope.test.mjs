// The options of docs/spec.md Part 4 (vHeadDim, dtype 'float16', stage, sinks, rope) on multiHeadAttention,
// attentionWeights, createKVCache and KVCache.attend: every bad value is a TypeError or RangeError that
// names the function and the parameter, says what was expected and what was given; the instance keeps
// working and its wasm heap does not grow. Then the properties of the new options: stage 'softmax' is the
// weights bit for bit, sinks of -1e30 are no sinks, float16 tensors give the float32 math rounded once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { widenHalves } from '../../scripts/lib/golden-runner.mjs';
import {
  bitsEqual,
  compare,
  expectError,
  heapCopy,
  loadSpecExample,
  mulberry32,
  randomNormal,
  randomProblem,
  roundToFloat16,
} from './helpers.mjs';

const mha = await createMHA();
// The spec example: B = 2, S = T = 5, D = 12, H = 3, Dh = 4.
const { q, k, v, out64, shape } = loadSpecExample();
const attend = (overrides, qq = q, kk = k, vv = v) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });
const weights = (overrides, qq = q, kk = k) => mha.attentionWeights(qq, kk, { ...shape, ...overrides });
const tables = mha.ropeTables({ rotaryDim: 4, positions: 5 });
const rope = { cos: tables.cos, sin: tables.sin };
const half = (length) => new Uint16Array(length).fill(0x3c00); // 1.0
const q16 = half(120);
const cacheOf = (options = {}) => mha.createKVCache({ batch: 2, numKvHeads: 3, headDim: 4, capacity: 4, ...options });
const cache = cacheOf();
const step = new Float32Array(2 * 1 * 12);
const step2 = new Float32Array(2 * 2 * 12);
const cacheAttend = (overrides, qq = step, kk = step, vv = step) =>
  cache.attend(qq, kk, vv, { numHeads: 3, ...overrides });

/** A Float32Array whose ArrayBuffer has been transferred away (detached): it reads as length 0. */
function detached(TypedArray, length) {
  const array = new TypedArray(length);
  structuredClone(array.buffer, { transfer: [array.buffer] });
  return array;
}

// [description, thunk, error class, message fragments]
export const BAD_PART4_OPTIONS = [
  // vHeadDim
  [
    'vHeadDim zero',
    () => attend({ vHeadDim: 0 }),
    RangeError,
    ['multiHeadAttention: vHeadDim', 'positive integer', 'got 0'],
  ],
  ['vHeadDim fractional', () => attend({ vHeadDim: 2.5 }), RangeError, ['multiHeadAttention: vHeadDim', 'got 2.5']],
  ['vHeadDim a string', () => attend({ vHeadDim: '2' }), TypeError, ['multiHeadAttention: vHeadDim', '"2"']],
  [
    'vHeadDim: v sized for headDim',
    () => attend({ vHeadDim: 2 }),
    RangeError,
    [
      'multiHeadAttention: v: expected Float32Array of length 60 (batch*kvSeqLen*numKvHeads*vHeadDim = 2*5*3*2)',
      'got length 120',
    ],
  ],
  [
    'vHeadDim: out sized for headDim',
    () => attend({ vHeadDim: 2, out: new Float32Array(120) }, q, k, new Float32Array(60)),
    RangeError,
    ['multiHeadAttention: out', 'length 60 (batch*seqLen*numHeads*vHeadDim = 2*5*3*2)', 'got length 120'],
  ],
  [
    'vHeadDim on attentionWeights',
    () => weights({ vHeadDim: 2 }),
    TypeError,
    ['attentionWeights: options: unknown option "vHeadDim"', 'has no v'],
  ],
  ['vHeadDim on createKVCache zero', () => cacheOf({ vHeadDim: 0 }), RangeError, ['createKVCache: vHeadDim', 'got 0']],
  [
    'vHeadDim on createKVCache a string',
    () => cacheOf({ vHeadDim: '3' }),
    TypeError,
    ['createKVCache: vHeadDim', '"3"'],
  ],
  // dtype
  [
    'dtype unknown string',
    () => attend({ dtype: 'bfloat16' }),
    RangeError,
    ['multiHeadAttention: dtype', "'float32' or 'float16'", '"bfloat16"'],
  ],
  ['dtype a number', () => attend({ dtype: 16 }), TypeError, ['multiHeadAttention: dtype', 'got 16']],
  [
    'dtype float16 with Float32Array q',
    () => attend({ dtype: 'float16' }),
    TypeError,
    [
      'multiHeadAttention: q: expected Uint16Array (binary16 bits) or Float16Array of length 120',
      "for dtype 'float16'",
      'Float32Array(120)',
    ],
  ],
  [
    'dtype float16 with a Float32Array v',
    () => attend({ dtype: 'float16' }, q16, q16, v),
    TypeError,
    ['multiHeadAttention: v', 'Uint16Array', 'Float32Array(120)'],
  ],
  [
    'dtype float16 with a Float32Array out',
    () => attend({ dtype: 'float16', out: new Float32Array(120) }, q16, q16, q16),
    TypeError,
    ['multiHeadAttention: out', 'Uint16Array'],
  ],
  [
    'dtype float16 with an Int16Array k',
    () => attend({ dtype: 'float16' }, q16, new Int16Array(120), q16),
    TypeError,
    ['multiHeadAttention: k', 'Int16Array(120)'],
  ],
  [
    'dtype float16 with a HeapTensor q',
    () => attend({ dtype: 'float16' }, heapCopy(mha, q), q16, q16),
    TypeError,
    ['multiHeadAttention: q', 'got a HeapTensor', 'heap tensors hold float32'],
  ],
  [
    'dtype float16 with a short q',
    () => attend({ dtype: 'float16' }, q16.subarray(1), q16, q16),
    RangeError,
    ['multiHeadAttention: q', 'length 120', 'got length 119'],
  ],
  [
    'dtype float16 with a detached v',
    () => attend({ dtype: 'float16' }, q16, q16, detached(Uint16Array, 120)),
    TypeError,
    ['multiHeadAttention: v', 'detached'],
  ],
  [
    'float32 call with a Uint16Array q',
    () => attend({}, q16),
    TypeError,
    ['multiHeadAttention: q', 'Uint16Array(120)', "dtype: 'float16'"],
  ],
  [
    'dtype on attentionWeights',
    () => weights({ dtype: 'float16' }),
    TypeError,
    ['attentionWeights: options: unknown option "dtype"', 'float32 q and k'],
  ],
  [
    'dtype float16 bias stays float32',
    () => attend({ dtype: 'float16', bias: new Uint16Array(150) }, q16, q16, q16),
    TypeError,
    ['multiHeadAttention: bias', 'Float32Array'],
  ],
  [
    'dtype float16 lse stays float32',
    () => attend({ dtype: 'float16', lse: new Uint16Array(30) }, q16, q16, q16),
    TypeError,
    ['multiHeadAttention: lse', 'Float32Array'],
  ],
  // stage
  [
    'stage unknown string',
    () => weights({ stage: 'logits' }),
    RangeError,
    ['attentionWeights: stage', "'scaled', 'softcapped', 'biased' or 'softmax'", '"logits"'],
  ],
  ['stage a number', () => weights({ stage: 3 }), TypeError, ['attentionWeights: stage', 'got 3']],
  [
    'stage on multiHeadAttention',
    () => attend({ stage: 'scaled' }),
    TypeError,
    ['multiHeadAttention: options: unknown option "stage"'],
  ],
  // sinks
  [
    'sinks too short',
    () => attend({ sinks: [0, 1] }),
    RangeError,
    ['multiHeadAttention: sinks', '3 finite numbers', 'one per query head, numHeads = 3', 'got length 2'],
  ],
  [
    'sinks too long',
    () => weights({ sinks: new Float32Array(4) }),
    RangeError,
    ['attentionWeights: sinks', 'got length 4'],
  ],
  [
    'sinks with NaN',
    () => attend({ sinks: [0, NaN, 1] }),
    RangeError,
    ['multiHeadAttention: sinks', 'finite numbers', 'got NaN at index 1'],
  ],
  [
    'sinks with -Infinity',
    () => weights({ sinks: [0, 1, -Infinity] }),
    RangeError,
    ['attentionWeights: sinks', 'got -Infinity at index 2'],
  ],
  ['sinks beyond float32', () => attend({ sinks: [1e39, 0, 0] }), RangeError, ['sinks', '(beyond float32)']],
  [
    'sinks with a string',
    () => attend({ sinks: [0, '1', 0] }),
    TypeError,
    ['multiHeadAttention: sinks', '"1" at index 1'],
  ],
  [
    'sinks a Float64Array',
    () => attend({ sinks: new Float64Array(3) }),
    TypeError,
    ['multiHeadAttention: sinks', 'Float32Array or number[]', 'Float64Array(3)'],
  ],
  ['sinks a number', () => attend({ sinks: 0 }), TypeError, ['multiHeadAttention: sinks', 'got 0']],
  ['cache: sinks too short', () => cacheAttend({ sinks: [1] }), RangeError, ['KVCache.attend: sinks', 'got length 1']],
  [
    'cache: sinks with NaN',
    () => cacheAttend({ sinks: [1, 2, NaN] }),
    RangeError,
    ['KVCache.attend: sinks', 'got NaN at index 2'],
  ],
  // rope
  [
    'rope not an object',
    () => attend({ rope: 4 }),
    TypeError,
    ['multiHeadAttention: rope', 'expected an options object', 'got 4'],
  ],
  [
    'rope unknown key',
    () => attend({ rope: { ...rope, theta: 10000 } }),
    TypeError,
    ['multiHeadAttention: rope', 'unknown option "theta"'],
  ],
  [
    'rope without tables',
    () => attend({ rope: {} }),
    TypeError,
    ['multiHeadAttention: rope: cos', 'Float32Array', 'got undefined'],
  ],
  [
    'rope cos a Float64Array',
    () => attend({ rope: { ...rope, cos: new Float64Array(10) } }),
    TypeError,
    ['rope: cos', 'Float64Array(10)'],
  ],
  [
    'rope sin a number[]',
    () => weights({ rope: { ...rope, sin: [0, 1] } }),
    TypeError,
    ['attentionWeights: rope: sin', 'Float32Array', 'Array(2)'],
  ],
  [
    'rope cos detached',
    () => attend({ rope: { ...rope, cos: detached(Float32Array, 10) } }),
    TypeError,
    ['rope: cos', 'detached'],
  ],
  [
    'rope rotaryDim odd',
    () => attend({ rope: { ...rope, rotaryDim: 3 } }),
    RangeError,
    ['multiHeadAttention: rope: rotaryDim', 'even integer in [2, headDim = 4]', 'got 3'],
  ],
  [
    'rope rotaryDim above headDim',
    () => weights({ rope: { ...rope, rotaryDim: 6 } }),
    RangeError,
    ['attentionWeights: rope: rotaryDim', 'got 6'],
  ],
  ['rope rotaryDim zero', () => attend({ rope: { ...rope, rotaryDim: 0 } }), RangeError, ['rope: rotaryDim', 'got 0']],
  [
    'rope rotaryDim a string',
    () => attend({ rope: { ...rope, rotaryDim: '4' } }),
    TypeError,
    ['rope: rotaryDim', '"4"'],
  ],
  [
    'rope interleaved a number',
    () => attend({ rope: { ...rope, interleaved: 1 } }),
    TypeError,
    ['rope: interleaved', 'a boolean', 'got 1'],
  ],
  [
    'rope tables of different lengths',
    () => attend({ rope: { cos: tables.cos, sin: tables.sin.subarray(2) } }),
    RangeError,
    ['multiHeadAttention: rope: sin', 'the length of cos (10)', 'got length 8'],
  ],
  [
    'rope table length no multiple of rotaryDim / 2',
    () => attend({ rope: { cos: new Float32Array(9), sin: new Float32Array(9) } }),
    RangeError,
    ['rope: cos', 'positive multiple of rotaryDim / 2 = 2', 'got length 9'],
  ],
  [
    'rope empty tables',
    () => attend({ rope: { cos: new Float32Array(0), sin: new Float32Array(0) } }),
    RangeError,
    ['rope: cos', 'got length 0'],
  ],
  [
    'rope: a query position past the tables',
    () => attend({ rope, queryOffset: 1 }),
    RangeError,
    [
      'multiHeadAttention: rope: position 5',
      'queryOffset + seqLen - 1 = 1 + 5 - 1',
      "past the tables' 5 rows",
      'nothing was computed',
    ],
  ],
  [
    'rope: a key position past the tables',
    () => weights({ rope: { cos: tables.cos.subarray(0, 8), sin: tables.sin.subarray(0, 8) } }),
    RangeError,
    ['attentionWeights: rope: position 4', "past the tables' 4 rows"],
  ],
  [
    'rope with rotaryDim 2: 10 rows, offset past them',
    () => weights({ rope: { ...rope, rotaryDim: 2 }, queryOffset: 6 }),
    RangeError,
    ['attentionWeights: rope: position 10', "tables' 10 rows"],
  ],
  [
    'cache: rope tables too short',
    () =>
      cacheAttend({ rope: { cos: tables.cos.subarray(0, 2), sin: tables.sin.subarray(0, 2) } }, step2, step2, step2),
    RangeError,
    ['KVCache.attend: rope: position 1', 'lengths[0] + n - 1 = 0 + 2 - 1', "tables' 1 rows", 'nothing was stored'],
  ],
  [
    'cache: rope rotaryDim odd',
    () => cacheAttend({ rope: { ...rope, rotaryDim: 1 } }),
    RangeError,
    ['KVCache.attend: rope: rotaryDim', 'got 1'],
  ],
  // KVCache.attend tensorDType (and dtype, its deprecated alias) and vHeadDim
  [
    'cache: tensorDType unknown',
    () => cacheAttend({ tensorDType: 'int8' }),
    RangeError,
    ['KVCache.attend: tensorDType', '"int8"'],
  ],
  [
    'cache: tensorDType not a string',
    () => cacheAttend({ tensorDType: 16 }),
    TypeError,
    ['KVCache.attend: tensorDType'],
  ],
  [
    'cache: dtype (alias) unknown',
    () => cacheAttend({ dtype: 'int8' }),
    RangeError,
    ['KVCache.attend: dtype', '"int8"'],
  ],
  [
    'cache: tensorDType and its alias dtype differ',
    () => cacheAttend({ tensorDType: 'float16', dtype: 'float32' }, half(24), half(24), half(24)),
    TypeError,
    ['KVCache.attend: options', 'tensorDType "float16"', 'dtype "float32"', 'alias'],
  ],
  [
    'cache: tensorDType and dtype differ, one of them unknown',
    () => cacheAttend({ tensorDType: 'float32', dtype: 'bfloat16' }),
    TypeError,
    ['KVCache.attend: options', 'tensorDType "float32"', 'dtype "bfloat16"'],
  ],
  [
    'cache: tensorDType float16 with Float32Array tensors',
    () => cacheAttend({ tensorDType: 'float16' }),
    TypeError,
    ['KVCache.attend: k', 'Uint16Array', 'Float32Array(24)', "for tensorDType 'float16'"],
  ],
  [
    'cache: dtype (alias) float16 with Float32Array tensors',
    () => cacheAttend({ dtype: 'float16' }),
    TypeError,
    ['KVCache.attend: k', 'Uint16Array', 'Float32Array(24)'],
  ],
  [
    'cache: Uint16Array tensors without tensorDType',
    () => cacheAttend({}, half(24), half(24), half(24)),
    TypeError,
    ['KVCache.attend: k', "tensorDType: 'float16'"],
  ],
  [
    'cache: tensorDType float16 with a HeapTensor',
    () => cacheAttend({ tensorDType: 'float16' }, half(24), heapCopy(mha, step), half(24)),
    TypeError,
    ['KVCache.attend: k', 'HeapTensor', "use tensorDType 'float32'"],
  ],
];

for (const [description, thunk, ErrorClass, fragments] of BAD_PART4_OPTIONS) {
  test(`bad Part 4 option: ${description} -> ${ErrorClass.name}`, () => expectError(thunk, ErrorClass, fragments));
}

test('after every bad Part 4 option the instance gives the golden answer, the cache is unchanged, and the wasm heap has not grown', () => {
  for (const [, thunk] of BAD_PART4_OPTIONS) assert.throws(thunk); // the tensors some cases allocate now exist
  const before = mha.memoryStats();
  for (let round = 0; round < 3; round++) {
    for (const [description, thunk] of BAD_PART4_OPTIONS) {
      if (/HeapTensor|createKVCache/.test(description)) continue; // they allocate
      assert.throws(thunk);
      const r = compare(mha.multiHeadAttention(q, k, v, shape), out64);
      assert.ok(r.maxError < 1e-5, `max error ${r.maxError} after "${description}"`);
      assert.equal(cache.length, 0, `the cache stored tokens after "${description}"`);
    }
  }
  assert.deepEqual(mha.memoryStats(), before, 'bad calls changed the heap');
});

test("stage 'softmax' is attentionWeights without stage, bit for bit, over random problems and options", () => {
  const random = mulberry32(3030);
  for (let n = 0; n < 40; n++) {
    const H = 1 + Math.floor(random() * 4);
    const spec = {
      batch: 1 + Math.floor(random() * 2),
      seqLen: 1 + Math.floor(random() * 7),
      kvSeqLen: 1 + Math.floor(random() * 9),
      numHeads: H,
      dModel: H * (1 + Math.floor(random() * 9)),
      causal: random() < 0.5,
      mask: random() < 0.3,
    };
    const { q: pq, k: pk, options } = randomProblem(spec, 100 + n);
    if (random() < 0.5) options.softcap = 5;
    if (random() < 0.5) options.sinks = randomNormal(H, random);
    const plain = mha.attentionWeights(pq, pk, options);
    assert.ok(bitsEqual(mha.attentionWeights(pq, pk, { ...options, stage: 'softmax' }), plain), `problem ${n}`);
  }
});

test('stages: scaled is scale*q.k everywhere, softcapped equals scaled without softcap, biased hides with -Infinity', () => {
  const scaled = weights({ stage: 'scaled' });
  assert.ok(bitsEqual(weights({ stage: 'softcapped' }), scaled));
  assert.ok(bitsEqual(weights({ stage: 'scaled', causal: true }), scaled), 'scaled ignores visibility');
  const biased = weights({ stage: 'biased', causal: true });
  for (let h = 0; h < 6; h++) {
    for (let i = 0; i < 5; i++) {
      for (let j = 0; j < 5; j++) {
        const x = biased[(h * 5 + i) * 5 + j];
        if (j > i) assert.equal(x, -Infinity);
        else assert.equal(x, scaled[(h * 5 + i) * 5 + j]);
      }
    }
  }
});

test('sinks of -1e30 equal no sinks: attentionWeights now, multiHeadAttention (out, lse) once the kernels compute sinks', () => {
  const sinks = [-1e30, -1e30, -1e30];
  for (const options of [{}, { causal: true }, { softcap: 3, window: [2, 0] }]) {
    assert.ok(bitsEqual(weights({ ...options, sinks }), weights(options)), JSON.stringify(options));
    const lse = new Float32Array(30);
    const lseSinks = new Float32Array(30);
    const plain = attend({ ...options, lse });
    const withSinks = attend({ ...options, sinks, lse: lseSinks });
    assert.ok(bitsEqual(withSinks, plain), `out ${JSON.stringify(options)}`);
    assert.ok(bitsEqual(lseSinks, lse), `lse ${JSON.stringify(options)}`);
  }
});

test('sinks: a row of weights sums to less than 1, and a row with no visible key weighs 0 (not NaN)', () => {
  const w = weights({ sinks: [0, 1, 2], kvLengths: [5, 0] });
  for (let row = 0; row < 15; row++) {
    const sum = w.subarray(row * 5, row * 5 + 5).reduce((a, b) => a + b, 0);
    assert.ok(sum < 1 && sum > 0, `row ${row}: ${sum}`);
  }
  assert.ok(
    w.subarray(75).every((x) => x === 0),
    'batch item 1 has no key: weights 0',
  );
});

test('rope with cos 1 and sin 0 equals no rope (weights); rotaryDim and interleaved change the result', () => {
  const identity = { cos: new Float32Array(10).fill(1), sin: new Float32Array(10) };
  assert.ok(bitsEqual(weights({ rope: identity }), weights({})));
  const full = weights({ rope });
  assert.ok(!bitsEqual(full, weights({})));
  assert.ok(!bitsEqual(weights({ rope: { ...rope, interleaved: true } }), full));
  const two = mha.ropeTables({ rotaryDim: 2, positions: 5 });
  assert.ok(!bitsEqual(weights({ rope: { ...two, rotaryDim: 2 } }), full));
  assert.equal(mha.ropeTables, mha.ropeTables);
});

/** Random binary16 bits of finite values of magnitude about `scale`. */
function randomHalves(length, random, scale = 1) {
  return Uint16Array.from(randomNormal(length, random), (x) => halfBits(roundToFloat16(x * scale)));
}
function halfBits(x) {
  if (Number.isNaN(x)) return 0x7e00;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a === Infinity) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | Math.round(a / 2 ** -24);
  const e = Math.floor(Math.log2(a));
  return sign | ((e + 15) << 10) | Math.round((a / 2 ** e - 1) * 1024);
}

test('float16 tensors: out is the float32 call on the widened inputs, rounded once to binary16 (nearest even), bit for bit', () => {
  const random = mulberry32(1616);
  for (const [spec, scale] of [
    [{ batch: 2, seqLen: 5, dModel: 12, numHeads: 3 }, 1],
    [{ batch: 1, seqLen: 7, kvSeqLen: 9, dModel: 32, numHeads: 4, numKvHeads: 2, causal: true }, 3],
    [{ batch: 3, seqLen: 4, dModel: 16, numHeads: 2, kvLengths: [4, 0, 2] }, 200],
  ]) {
    const kvWidth = (spec.dModel / spec.numHeads) * (spec.numKvHeads ?? spec.numHeads);
    const T = spec.kvSeqLen ?? spec.seqLen;
    const [hq, hk, hv] = [spec.seqLen * spec.dModel, T * kvWidth, T * kvWidth].map((n) =>
      randomHalves(spec.batch * n, random, scale),
    );
    const out = mha.multiHeadAttention(hq, hk, hv, { ...spec, dtype: 'float16' });
    assert.ok(out instanceof Uint16Array);
    const f32 = mha.multiHeadAttention(widenHalves(hq), widenHalves(hk), widenHalves(hv), spec);
    const expected = Uint16Array.from(f32, (x) => halfBits(roundToFloat16(x)));
    assert.deepEqual(Array.from(out), Array.from(expected), JSON.stringify(spec));
    // out given: filled and returned; lse stays float32 and equals the float32 call's.
    const given = new Uint16Array(out.length);
    const lse = new Float32Array(spec.batch * spec.numHeads * spec.seqLen);
    const lse32 = new Float32Array(lse.length);
    mha.multiHeadAttention(widenHalves(hq), widenHalves(hk), widenHalves(hv), { ...spec, lse: lse32 });
    assert.equal(mha.multiHeadAttention(hq, hk, hv, { ...spec, dtype: 'float16', out: given, lse }), given);
    assert.ok(bitsEqual(given, out) && bitsEqual(lse, lse32));
  }
});

test('float16 rounding of out: exact values stay, ties go to even, NaN stays NaN', () => {
  // One key (weight exactly 1): out = v, so the widening and the rounding are exact inverses.
  const bits = Uint16Array.from([
    0x0000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3555,
  ]);
  const n = bits.length;
  const zeros = new Uint16Array(n);
  assert.deepEqual(
    Array.from(
      mha.multiHeadAttention(zeros, zeros, bits, { batch: n, seqLen: 1, dModel: 1, numHeads: 1, dtype: 'float16' }),
    ),
    Array.from(bits),
  );
  // Two keys of equal score (q = k = 0: weights exactly 1/2): out = (v0 + v1) / 2 exactly in float32, a binary16 tie here.
  const pairs = [
    [0x3c00, 0x3c01, 0x3c00],
    [0x3c01, 0x3c02, 0x3c02],
    [0x0001, 0x0002, 0x0002],
    [0x0000, 0x0001, 0x0000],
    [0xbc00, 0xbc01, 0xbc00],
  ];
  const v2 = Uint16Array.from(pairs.flatMap(([a, b]) => [a, b]));
  const out = mha.multiHeadAttention(new Uint16Array(pairs.length), new Uint16Array(v2.length), v2, {
    batch: pairs.length,
    seqLen: 1,
    kvSeqLen: 2,
    dModel: 1,
    numHeads: 1,
    dtype: 'float16',
  });
  assert.deepEqual(
    Array.from(out),
    pairs.map(([, , even]) => even),
  );
});

test(
  'Uint16Array and Float16Array tensors give the same bits (where the engine has Float16Array)',
  {
    skip:
      typeof Float16Array !== 'function' &&
      'this engine has no Float16Array (Node 20); the golden runner checks it in the browsers',
  },
  () => {
    const random = mulberry32(77);
    const [hq, hk, hv] = [0, 1, 2].map(() => randomHalves(120, random));
    const bitsOut = mha.multiHeadAttention(hq, hk, hv, { ...shape, dtype: 'float16' });
    const f16 = (x) => new Float16Array(x.buffer);
    const out = mha.multiHeadAttention(f16(hq), f16(hk), f16(hv), { ...shape, dtype: 'float16' });
    assert.ok(out instanceof Float16Array);
    assert.deepEqual(Array.from(new Uint16Array(out.buffer)), Array.from(bitsOut));
  },
);

test('float16 k and v into a float16 cache are stored as given: the same bits as their widened float32 values', () => {
  const random = mulberry32(99);
  const f16Cache = cacheOf({ dtype: 'float16', capacity: 6 });
  const f32Cache = cacheOf({ dtype: 'float16', capacity: 6 });
  try {
    for (const n of [3, 1, 2]) {
      const [hq, hk, hv] = [0, 1, 2].map(() => randomHalves(2 * n * 12, random, 2));
      const out = f16Cache.attend(hq, hk, hv, { numHeads: 3, tensorDType: 'float16' });
      const out32 = f32Cache.attend(widenHalves(hq), widenHalves(hk), widenHalves(hv), { numHeads: 3 });
      assert.deepEqual(
        Array.from(out),
        Array.from(out32, (x) => halfBits(roundToFloat16(x))),
        `step of ${n}`,
      );
    }
    assert.equal(f16Cache.length, 6);
  } finally {
    f16Cache.free();
    f32Cache.free();
  }
});

test("cache.attend: dtype, tensorDType's deprecated alias, and both given the same give the bits of tensorDType; each read once", () => {
  const random = mulberry32(7);
  const [hq, hk, hv] = [0, 1, 2].map(() => randomHalves(2 * 2 * 12, random, 2));
  const outs = [];
  for (const types of [
    { tensorDType: 'float16' },
    { dtype: 'float16' },
    { tensorDType: 'float16', dtype: 'float16' },
  ]) {
    const c = cacheOf({ dtype: 'float16' });
    try {
      const reads = {};
      const options = { numHeads: 3 };
      for (const [key, value] of Object.entries(types)) {
        Object.defineProperty(options, key, {
          enumerable: true,
          get: () => ((reads[key] = (reads[key] ?? 0) + 1), value),
        });
      }
      const out = c.attend(hq, hk, hv, options);
      assert.ok(out instanceof Uint16Array, JSON.stringify(types));
      assert.deepEqual(reads, Object.fromEntries(Object.keys(types).map((key) => [key, 1])), JSON.stringify(types));
      outs.push(Array.from(out));
    } finally {
      c.free();
    }
  }
  assert.deepEqual(outs[1], outs[0]);
  assert.deepEqual(outs[2], outs[0]);
  // float32 given either way is the default: a Float32Array result from Float32Array tensors.
  const c = cacheOf();
  try {
    assert.ok(
      c.attend(step, step, step, { numHeads: 3, tensorDType: 'float32', dtype: 'float32' }) instanceof Float32Array,
    );
  } finally {
    c.free();
  }
});

test('vHeadDim: multiHeadAttention returns (B, S, H·Dv); the cache takes vHeadDim, rope and sinks; nothing else changes', () => {
  const v2 = randomNormal(60, mulberry32(5));
  const out = attend({ vHeadDim: 2 }, q, k, v2);
  assert.equal(out.length, 60);
  cacheOf({ vHeadDim: 2 }).free();
  cacheAttend({ rope, sinks: [0, 0, 0] });
  assert.equal(cache.length, 1);
  cache.truncate(0);
  assert.ok(compare(attend({}), out64).maxError < 1e-5);
});

test('a getter that detaches the rope tables during validation is caught before the heap is touched', () => {
  for (const fn of ['multiHeadAttention', 'attentionWeights']) {
    const cos = new Float32Array(tables.cos);
    const options = { ...shape, rope: { cos, sin: tables.sin } };
    // out (multiHeadAttention) and stage (attentionWeights) are read after rope is checked.
    Object.defineProperty(options, fn === 'multiHeadAttention' ? 'out' : 'stage', {
      enumerable: true,
      get: () => {
        structuredClone(cos.buffer, { transfer: [cos.buffer] });
        return undefined;
      },
    });
    expectError(
      () =>
        fn === 'multiHeadAttention' ? mha.multiHeadAttention(q, k, v, options) : mha.attentionWeights(q, k, options),
      TypeError,
      [`${fn}: rope: cos: the Float32Array's ArrayBuffer was detached during validation`],
    );
  }
  assert.ok(compare(attend({}), out64).maxError < 1e-5);
});

test('vHeadDim with heap tensors (q, k, v, out) gives the bits of the Float32Array call', () => {
  const v2 = randomNormal(60, mulberry32(8));
  const arrays = attend({ vHeadDim: 2 }, q, k, v2);
  const [tq, tk, tv, tOut] = [heapCopy(mha, q), heapCopy(mha, k), heapCopy(mha, v2), mha.allocate(60)];
  try {
    mha.multiHeadAttention(tq, tk, tv, { ...shape, vHeadDim: 2, out: tOut });
    assert.ok(bitsEqual(tOut.toArray(), arrays));
    expectError(() => mha.multiHeadAttention(tq, tk, tk, { ...shape, vHeadDim: 2, out: tOut }), RangeError, [
      'multiHeadAttention: v: expected HeapTensor of length 60 (batch*kvSeqLen*numKvHeads*vHeadDim = 2*5*3*2), got length 120',
    ]);
  } finally {
    [tq, tk, tv, tOut].forEach((t) => t.free());
  }
});

test('float16: every finite binary16 value but -0 goes through a call unchanged (one key: out = v), NaN stays NaN', () => {
  const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const zeros = new Uint16Array(all.length);
  const out = mha.multiHeadAttention(zeros, zeros, all, {
    batch: all.length,
    seqLen: 1,
    dModel: 1,
    numHeads: 1,
    dtype: 'float16',
  });
  for (let h = 0; h < 65536; h++) {
    const nan = (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
    if (nan)
      assert.ok(
        (out[h] & 0x7c00) === 0x7c00 && (out[h] & 0x3ff) !== 0,
        `NaN ${h.toString(16)} gave ${out[h].toString(16)}`,
      );
    else if (h !== 0x8000) assert.equal(out[h], h, `0x${h.toString(16)}`); // -0: 1 * -0 summed from +0 is +0
  }
});

test('float16 calls split into staging groups (single thread, and pipelined on 2 threads) give the bits of the float32 call rounded', async () => {
  const threaded = await createMHA({ threads: 2 });
  try {
    // 8 items of (256, 64): about 2 MB of staging, so the call runs in groups of batch items.
    const spec = { batch: 8, seqLen: 256, dModel: 64, numHeads: 4, causal: true };
    const random = mulberry32(4242);
    const [hq, hk, hv] = [0, 1, 2].map(() => randomHalves(8 * 256 * 64, random));
    const expected = Uint16Array.from(
      mha.multiHeadAttention(widenHalves(hq), widenHalves(hk), widenHalves(hv), spec),
      (x) => halfBits(roundToFloat16(x)),
    );
    for (const instance of [mha, threaded]) {
      const out = instance.multiHeadAttention(hq, hk, hv, { ...spec, dtype: 'float16' });
      assert.ok(bitsEqual(out, expected), `threads ${instance.info.threads}`);
      // out aliasing q exactly (the same array) is read before it is written, group by group.
      const q2 = new Uint16Array(hq);
      assert.equal(instance.multiHeadAttention(q2, hk, hv, { ...spec, dtype: 'float16', out: q2 }), q2);
      assert.ok(bitsEqual(q2, expected), `out = q, threads ${instance.info.threads}`);
    }
  } finally {
    threaded.dispose();
  }
});
