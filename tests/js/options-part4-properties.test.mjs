// The properties of docs/spec.md Part 4's options: stage 'softmax' is the weights bit for bit, sinks of
// -1e30 are no sinks, float16 tensors give the float32 math rounded once, vHeadDim and rope through every
// call. Their bad values are in options-dv-f16-stage-sinks-rope.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { widenHalves } from '../../scripts/lib/golden-runner.mjs';
import {
  bitsEqual,
  compare,
  expectError,
  heapCopy,
  mulberry32,
  randomNormal,
  randomProblem,
  roundToFloat16,
} from './helpers.mjs';
import {
  mha,
  q,
  k,
  v,
  out64,
  attend,
  weights,
  tables,
  rope,
  cacheOf,
  cache,
  step,
  cacheAttend,
  detached,
  shape,
} from './fixtures/part4-setup.mjs';

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
