// Hardening of the public API: the bad-input matrix beyond errors.test.mjs (every parameter of every
// public function), wasm heap safety (shapes that cannot fit, malloc failure, flat memory over 20,000
// mixed calls); aliasing, views, shared and detached buffers and instances across worker threads are in
// hardening-buffers-threads.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { compare, expectError, fullGc, loadSpecExample, mulberry32, randomNormal, referenceMHA } from './helpers.mjs';

const mha = await createMHA();
const { q, k, v, out64, shape } = loadSpecExample();
const attend = (overrides, qq = q, kk = k, vv = v) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });
const weights = (overrides, qq = q, kk = k) => mha.attentionWeights(qq, kk, { ...shape, ...overrides });

/** A Float32Array whose ArrayBuffer has been transferred away (detached): it reads as length 0. */
function detached(TypedArray = Float32Array, length = 120) {
  const array = new TypedArray(length);
  structuredClone(array.buffer, { transfer: [array.buffer] });
  return array;
}

// Largest shape whose weights (B,H,S,T) stay below 2^31 elements and their bytes below the 4 GiB limit,
// but need more than the wasm memory has room for: malloc itself returns 0 (ABORTING_MALLOC=0), nothing is
// allocated or grown.
const MALLOC_FAIL_S = 32767; // weights 4*S^2 bytes, with q, k and alignment 4,294,967,312 > the 4 GiB heap
const mallocQ = new Float32Array(MALLOC_FAIL_S);
const mallocFail = () =>
  mha.attentionWeights(mallocQ, mallocQ, { batch: 1, seqLen: MALLOC_FAIL_S, dModel: 1, numHeads: 1 });

// ---------------------------------------------------------------------------------------------
// 1. The bad-input matrix, second half: what errors.test.mjs (33 cases) does not cover.
// [description, thunk, error class, message fragments]
export const MORE_BAD_INPUTS = [
  // multiHeadAttention: q, k, v, out as arrays of the wrong kind, missing, detached, or Proxies
  ['mha: q missing', () => mha.multiHeadAttention(undefined, k, v, shape), TypeError, ['q:', 'undefined']],
  ['mha: k a plain Array', () => mha.multiHeadAttention(q, Array.from(k), v, shape), TypeError, ['k:', 'Array(120)']],
  [
    'mha: v one element long',
    () => attend({}, q, k, v.subarray(0, 121 - 120)),
    RangeError,
    ['v:', 'length 120', 'got length 1'],
  ],
  ['mha: q detached', () => attend({}, detached()), TypeError, ['q:', 'detached']],
  ['mha: k detached', () => attend({}, q, detached()), TypeError, ['k:', 'detached']],
  ['mha: v detached', () => attend({}, q, k, detached()), TypeError, ['v:', 'detached']],
  ['mha: out detached', () => attend({ out: detached() }), TypeError, ['out:', 'detached']],
  ['mha: q a Proxy of a Float32Array', () => attend({}, new Proxy(q, {})), TypeError, ['q:', 'Proxy']],
  [
    'mha: mask a Proxy of a Uint8Array',
    () => attend({ mask: new Proxy(new Uint8Array(50), {}) }),
    TypeError,
    ['mask:', 'Proxy'],
  ],
  ['mha: out a Float64Array', () => attend({ out: new Float64Array(120) }), TypeError, ['out:', 'Float64Array(120)']],
  ['mha: out a plain Array', () => attend({ out: new Array(120).fill(0) }), TypeError, ['out:', 'Array(120)']],
  ['mha: out null', () => attend({ out: null }), TypeError, ['out:', 'null']],
  // dims: every dim, every kind of bad value
  ['mha: batch null', () => attend({ batch: null }), TypeError, ['batch', 'null']],
  ['mha: batch negative', () => attend({ batch: -1 }), RangeError, ['batch', 'got -1']],
  ['mha: batch Infinity', () => attend({ batch: Infinity }), RangeError, ['batch', 'got Infinity']],
  ['mha: batch 2^31', () => attend({ batch: 2 ** 31 }), RangeError, ['batch', 'below 2^31']],
  ['mha: batch a BigInt', () => attend({ batch: 2n }), TypeError, ['batch', '2']],
  ['mha: seqLen missing', () => attend({ seqLen: undefined }), TypeError, ['seqLen', 'undefined']],
  ['mha: seqLen zero', () => attend({ seqLen: 0 }), RangeError, ['seqLen', 'got 0']],
  ['mha: seqLen NaN', () => attend({ seqLen: NaN }), RangeError, ['seqLen', 'got NaN']],
  ['mha: dModel missing', () => attend({ dModel: undefined }), TypeError, ['dModel', 'undefined']],
  ['mha: dModel zero', () => attend({ dModel: 0 }), RangeError, ['dModel', 'got 0']],
  ['mha: dModel negative', () => attend({ dModel: -12 }), RangeError, ['dModel', 'got -12']],
  ['mha: dModel fractional', () => attend({ dModel: 12.5 }), RangeError, ['dModel', 'got 12.5']],
  ['mha: dModel a string', () => attend({ dModel: '12' }), TypeError, ['dModel', '"12"']],
  ['mha: numHeads missing', () => attend({ numHeads: undefined }), TypeError, ['numHeads', 'undefined']],
  ['mha: numHeads zero', () => attend({ numHeads: 0 }), RangeError, ['numHeads', 'got 0']],
  ['mha: numHeads negative', () => attend({ numHeads: -3 }), RangeError, ['numHeads', 'got -3']],
  ['mha: numHeads fractional', () => attend({ numHeads: 1.5 }), RangeError, ['numHeads', 'got 1.5']],
  ['mha: numHeads NaN', () => attend({ numHeads: NaN }), RangeError, ['numHeads', 'got NaN']],
  ['mha: numHeads > dModel', () => attend({ numHeads: 24 }), RangeError, ['dModel', 'multiple of numHeads (24)']],
  ['mha: kvSeqLen negative', () => attend({ kvSeqLen: -5 }), RangeError, ['kvSeqLen', 'got -5']],
  ['mha: kvSeqLen fractional', () => attend({ kvSeqLen: 5.5 }), RangeError, ['kvSeqLen', 'got 5.5']],
  ['mha: kvSeqLen NaN', () => attend({ kvSeqLen: NaN }), RangeError, ['kvSeqLen', 'got NaN']],
  ['mha: kvSeqLen Infinity', () => attend({ kvSeqLen: Infinity }), RangeError, ['kvSeqLen', 'got Infinity']],
  ['mha: kvSeqLen a string', () => attend({ kvSeqLen: '5' }), TypeError, ['kvSeqLen', '"5"']],
  ['mha: kvSeqLen null', () => attend({ kvSeqLen: null }), TypeError, ['kvSeqLen', 'null']],
  // product of dims beyond 2^32 (each dim valid)
  [
    'mha: batch*seqLen*dModel = 2^33',
    () => attend({ batch: 2 ** 16, seqLen: 2 ** 16, dModel: 2, numHeads: 1 }),
    RangeError,
    ['too large', 'batch*seqLen*dModel'],
  ],
  [
    'mha: batch*kvSeqLen*dModel beyond 2^32',
    () => attend({ batch: 2, seqLen: 1, kvSeqLen: 2 ** 30, dModel: 4, numHeads: 1 }),
    RangeError,
    ['too large', 'batch*kvSeqLen*dModel'],
  ],
  [
    'mha: mask with batch*seqLen*kvSeqLen beyond 2^32',
    () => {
      const n = 4 * 2 ** 16;
      return attend(
        { batch: 4, seqLen: 2 ** 16, kvSeqLen: 2 ** 16, dModel: 1, numHeads: 1, mask: new Uint8Array(8) },
        new Float32Array(n),
        new Float32Array(n),
        new Float32Array(n),
      );
    },
    RangeError,
    ['too large for a mask', 'batch*seqLen*kvSeqLen = 4*65536*65536'],
  ],
  // mask
  ['mha: mask detached', () => attend({ mask: detached(Uint8Array, 50) }), TypeError, ['mask', 'detached']],
  ['mha: mask an Int8Array', () => attend({ mask: new Int8Array(50) }), TypeError, ['mask', 'Int8Array(50)']],
  [
    'mha: mask a Uint8ClampedArray',
    () => attend({ mask: new Uint8ClampedArray(50) }),
    TypeError,
    ['mask', 'Uint8ClampedArray(50)'],
  ],
  ['mha: mask a number', () => attend({ mask: 1 }), TypeError, ['mask', 'got 1']],
  [
    'mha: mask boolean[] too long',
    () => attend({ mask: new Array(51).fill(true) }),
    RangeError,
    ['mask', 'length 50', 'got length 51'],
  ],
  ['mha: mask boolean[] with a hole', () => attend({ mask: new Array(50) }), TypeError, ['mask', 'boolean', 'index 0']],
  [
    'mha: mask boolean[] with a string',
    () => attend({ mask: [...new Array(49).fill(true), 'false'] }),
    TypeError,
    ['mask', '"false"', 'index 49'],
  ],
  // causal, scale
  ['mha: causal 1', () => attend({ causal: 1 }), TypeError, ['causal', 'boolean', 'got 1']],
  ['mha: causal null', () => attend({ causal: null }), TypeError, ['causal', 'null']],
  ['mha: scale +Infinity', () => attend({ scale: Infinity }), RangeError, ['scale', 'finite', 'Infinity']],
  ['mha: scale null', () => attend({ scale: null }), TypeError, ['scale', 'null']],
  ['mha: scale a BigInt', () => attend({ scale: 1n }), TypeError, ['scale']],
  // the options object itself
  ['mha: options an array', () => mha.multiHeadAttention(q, k, v, [2, 5, 12, 3]), TypeError, ['options', 'Array(4)']],
  ['mha: options a number', () => mha.multiHeadAttention(q, k, v, 5), TypeError, ['options', 'got 5']],
  ['mha: unknown option (case)', () => attend({ Causal: true }), TypeError, ['unknown option "Causal"']],
  ['mha: unknown option (headDim)', () => attend({ headDim: 4 }), TypeError, ['unknown option "headDim"']],
  // splitHeads / mergeHeads: x, shape, every dim
  ['splitHeads: x missing', () => mha.splitHeads(undefined, shape), TypeError, ['splitHeads: x', 'undefined']],
  ['splitHeads: x detached', () => mha.splitHeads(detached(), shape), TypeError, ['splitHeads: x', 'detached']],
  [
    'splitHeads: x a Float64Array',
    () => mha.splitHeads(new Float64Array(120), shape),
    TypeError,
    ['splitHeads: x', 'Float64Array(120)'],
  ],
  ['splitHeads: shape missing', () => mha.splitHeads(q), TypeError, ['splitHeads: shape', 'undefined']],
  [
    'splitHeads: batch zero',
    () => mha.splitHeads(q, { ...shape, batch: 0 }),
    RangeError,
    ['splitHeads: batch', 'got 0'],
  ],
  [
    'splitHeads: seqLen NaN',
    () => mha.splitHeads(q, { ...shape, seqLen: NaN }),
    RangeError,
    ['splitHeads: seqLen', 'NaN'],
  ],
  [
    'splitHeads: dModel fractional',
    () => mha.splitHeads(q, { ...shape, dModel: 1.5 }),
    RangeError,
    ['splitHeads: dModel', '1.5'],
  ],
  [
    'splitHeads: numHeads does not divide',
    () => mha.splitHeads(q, { ...shape, numHeads: 5 }),
    RangeError,
    ['splitHeads: dModel', 'multiple of numHeads (5)'],
  ],
  [
    'splitHeads: option mask is unknown',
    () => mha.splitHeads(q, { ...shape, mask: new Uint8Array(50) }),
    TypeError,
    ['unknown option "mask"'],
  ],
  ['mergeHeads: xh missing', () => mha.mergeHeads(undefined, shape), TypeError, ['mergeHeads: xh', 'undefined']],
  [
    'mergeHeads: xh too long',
    () => mha.mergeHeads(new Float32Array(121), shape),
    RangeError,
    ['mergeHeads: xh', 'batch*numHeads*seqLen*headDim = 2*3*5*4', 'got length 121'],
  ],
  ['mergeHeads: shape null', () => mha.mergeHeads(q, null), TypeError, ['mergeHeads: shape', 'null']],
  [
    'mergeHeads: numHeads missing',
    () => mha.mergeHeads(q, { ...shape, numHeads: undefined }),
    TypeError,
    ['mergeHeads: numHeads', 'undefined'],
  ],
  [
    'mergeHeads: batch Infinity',
    () => mha.mergeHeads(q, { ...shape, batch: Infinity }),
    RangeError,
    ['mergeHeads: batch', 'Infinity'],
  ],
  [
    'mergeHeads: option causal is unknown',
    () => mha.mergeHeads(q, { ...shape, causal: true }),
    TypeError,
    ['unknown option "causal"'],
  ],
  // attentionWeights: q, k, options, every option
  [
    'weights: q missing',
    () => mha.attentionWeights(undefined, k, shape),
    TypeError,
    ['attentionWeights: q', 'undefined'],
  ],
  [
    'weights: k a Float64Array',
    () => weights({}, q, new Float64Array(120)),
    TypeError,
    ['attentionWeights: k', 'Float64Array(120)'],
  ],
  ['weights: q detached', () => weights({}, detached()), TypeError, ['attentionWeights: q', 'detached']],
  ['weights: options missing', () => mha.attentionWeights(q, k), TypeError, ['attentionWeights: options', 'undefined']],
  ['weights: out is not an option', () => weights({ out: new Float32Array(150) }), TypeError, ['unknown option "out"']],
  ['weights: kvSeqLen zero', () => weights({ kvSeqLen: 0 }), RangeError, ['attentionWeights: kvSeqLen', 'got 0']],
  [
    'weights: mask wrong length',
    () => weights({ mask: new Uint8Array(10) }),
    RangeError,
    ['attentionWeights: mask', 'length 50'],
  ],
  ['weights: causal a string', () => weights({ causal: 'true' }), TypeError, ['attentionWeights: causal', '"true"']],
  ['weights: scale NaN', () => weights({ scale: NaN }), RangeError, ['attentionWeights: scale', 'NaN']],
  ['weights: numHeads zero', () => weights({ numHeads: 0 }), RangeError, ['attentionWeights: numHeads', 'got 0']],
  // heap: shapes that pass the element limits but cannot be staged in the wasm memory
  [
    'weights: 2^30 weights = 4 GiB, beyond the wasm memory',
    () =>
      mha.attentionWeights(new Float32Array(2 ** 15), new Float32Array(2 ** 15), {
        batch: 1,
        seqLen: 2 ** 15,
        dModel: 1,
        numHeads: 1,
      }),
    RangeError,
    ['bytes of wasm memory'],
  ],
  [
    'weights: staging of 4 GiB + 16 bytes, refused before malloc',
    mallocFail,
    RangeError,
    [
      'attentionWeights: staging the inputs and output needs 4294967312 bytes of wasm memory',
      'the instance can still have',
    ],
  ],
];

for (const [description, thunk, ErrorClass, fragments] of MORE_BAD_INPUTS) {
  test(`bad input: ${description} -> ${ErrorClass.name}`, () => expectError(thunk, ErrorClass, fragments));
}

test('createMHA: every bad options value is rejected', async () => {
  const cases = [
    [null, TypeError, 'null'],
    ['fast', TypeError, '"fast"'],
    [[2], TypeError, 'Array(1)'],
    [{ threads: -1 }, RangeError, 'threads'],
    [{ threads: 1.5 }, RangeError, 'threads'],
    [{ threads: NaN }, RangeError, 'threads'],
    [{ threads: Infinity }, RangeError, 'threads'],
    [{ threads: null }, TypeError, 'threads'],
    [{ threads: 'max' }, TypeError, 'threads'],
    [{ threads: 65 }, RangeError, 'threads'],
    [{ simd: true }, RangeError, 'simd'],
    [{ simd: 0 }, TypeError, 'simd'],
    [{ threads: 2, simd: false, fast: true }, TypeError, 'unknown option "fast"'],
  ];
  for (const [options, ErrorClass, fragment] of cases) {
    await assert.rejects(
      createMHA(options),
      (e) => e instanceof ErrorClass && e.message.includes(fragment),
      `createMHA(${JSON.stringify(options)})`,
    );
  }
  // Allowed: no options, {}, 'auto', a positive integer, a key explicitly undefined (threads: see threads.test.mjs).
  for (const options of [undefined, {}, { threads: 'auto' }, { threads: 3 }, { threads: undefined }, { simd: false }]) {
    const instance = await createMHA(options);
    assert.ok(instance.info.threads >= 1);
    instance.dispose();
  }
});

test('dispose() and memoryStats() take no arguments, ignore extras, and can be called any time', () => {
  const stats = mha.memoryStats('ignored');
  assert.equal(typeof stats.wasmMemoryBytes, 'number');
  assert.equal(typeof stats.heapBytesInUse, 'number');
  mha.dispose();
  mha.dispose(123); // twice, with an argument: harmless
  assert.ok(compare(attend({}), out64).maxError < 1e-5);
});

test('scale 0 and negative scales are allowed (documented); tiny and huge finite scales too', () => {
  for (const scale of [0, -0, -1, -1e30, 1e-30, 1e30, Number.MIN_VALUE]) {
    const out = attend({ scale });
    const ref = referenceMHA(q, k, v, { ...shape, scale: Math.fround(scale) });
    const r = compare(out, ref);
    assert.equal(r.specialMismatch, -1, `scale ${scale}: NaN or infinity positions differ`);
    assert.ok(
      r.maxError < 1e-4 * Math.max(1, r.maxExpected) || Math.abs(scale) > 1e6,
      `scale ${scale}: max error ${r.maxError}`,
    );
  }
});

test('after every bad input (both matrices) the instance still gives the golden answer', () => {
  for (const [, thunk] of MORE_BAD_INPUTS) {
    assert.throws(thunk);
    assert.ok(compare(attend({}), out64).maxError < 1e-5);
  }
});

// ---------------------------------------------------------------------------------------------
// 2. Heap safety: failing allocations leave the instance working and the heap as it was.

test('a malloc failure leaves the wasm memory size unchanged and the instance working', () => {
  attend({});
  const before = mha.memoryStats();
  expectError(mallocFail, RangeError, ['bytes of wasm memory']);
  assert.equal(mha.memoryStats().wasmMemoryBytes, before.wasmMemoryBytes, 'a failed malloc grew the memory');
  assert.ok(compare(attend({}), out64).maxError < 1e-5);
  assert.equal(mha.memoryStats().heapBytesInUse, before.heapBytesInUse);
});

test('wasm memory and process external memory are flat over 20,000 valid, invalid and allocation-failing calls', () => {
  const random = mulberry32(11);
  const s2 = { batch: 1, seqLen: 33, kvSeqLen: 17, dModel: 64, numHeads: 4 };
  const q2 = randomNormal(33 * 64, random);
  const kv2 = randomNormal(17 * 64, random);
  const mask2 = new Uint8Array(33 * 17).fill(1);
  const big = new Float32Array(2 ** 15);
  const calls = [
    () => attend({}),
    () => attend({ causal: true, mask: new Array(50).fill(true) }),
    () => mha.multiHeadAttention(q2, kv2, kv2, { ...s2, mask: mask2 }),
    () => weights({ causal: true }),
    () => mha.mergeHeads(mha.splitHeads(q, shape), shape),
    () => assert.throws(() => attend({ numHeads: 5 }), RangeError),
    () => assert.throws(() => attend({}, q, k.subarray(1)), RangeError),
    () => assert.throws(() => attend({ out: detached() }), TypeError),
    () => assert.throws(mallocFail, RangeError), // malloc returns 0
    () =>
      assert.throws(
        () => mha.attentionWeights(big, big, { batch: 1, seqLen: 2 ** 15, dModel: 1, numHeads: 1 }),
        RangeError,
      ),
  ];
  // One round ends with the largest valid call, so the staging arena has the same size at each reading.
  const round = () => {
    for (const call of calls) call();
    mha.multiHeadAttention(q2, kv2, kv2, s2);
  };
  for (let i = 0; i < 50; i++) round();
  fullGc();
  const before = mha.memoryStats();
  const externalBefore = process.memoryUsage().external;
  const rounds = 20000 / calls.length;
  for (let i = 0; i < rounds; i++) {
    round();
    if (i % 500 === 499) {
      const now = mha.memoryStats();
      assert.equal(
        now.heapBytesInUse,
        before.heapBytesInUse,
        `heap bytes in use changed after ${(i + 1) * calls.length} calls`,
      );
      assert.equal(
        now.wasmMemoryBytes,
        before.wasmMemoryBytes,
        `wasm memory grew after ${(i + 1) * calls.length} calls`,
      );
    }
  }
  fullGc();
  const after = mha.memoryStats();
  const externalAfter = process.memoryUsage().external;
  console.log(
    `# 20,000 calls: wasm heap in use ${before.heapBytesInUse} -> ${after.heapBytesInUse} B, memory ${before.wasmMemoryBytes} -> ${after.wasmMemoryBytes} B, external ${externalBefore} -> ${externalAfter} B`,
  );
  assert.equal(after.heapBytesInUse, before.heapBytesInUse);
  assert.equal(after.wasmMemoryBytes, before.wasmMemoryBytes);
  assert.ok(externalAfter - externalBefore < 65536, `external memory grew by ${externalAfter - externalBefore} bytes`);
});
