// The options of docs/spec.md Part 4 (vHeadDim, dtype 'float16', stage, sinks, rope) on multiHeadAttention,
// attentionWeights, createKVCache and KVCache.attend: every bad value is a TypeError or RangeError that
// names the function and the parameter, says what was expected and what was given; the instance keeps
// working and its wasm heap does not grow. The options' properties are in options-part4-properties.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compare, expectError, heapCopy } from './helpers.mjs';
import {
  mha,
  q,
  k,
  v,
  out64,
  shape,
  attend,
  weights,
  tables,
  rope,
  half,
  q16,
  cacheOf,
  cache,
  step,
  step2,
  cacheAttend,
  detached,
} from './fixtures/part4-setup.mjs';

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
