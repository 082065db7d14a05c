// Attention states (docs/spec.md 5.3): cache.attend's lse (every form it takes, every path: the tiled
// prefill, the decode kernel, ragged rows, sinks) against the stateless call over the keys the cache holds,
// and mha.mergeAttention: states over disjoint key sets merge into the state of the whole call.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, mulberry32 } from './helpers.mjs';

const mha = await createMHA();
const [B, H, HKV, DH] = [2, 4, 2, 16];
const random = mulberry32(20261205);
const rand = (n) => Float32Array.from({ length: n }, () => random() * 2 - 1);

/** Largest |a - b| over finite pairs; infinities and NaN must sit at the same places with the same value. */
function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(a[i]) || !Number.isFinite(b[i])) {
      assert.ok(Object.is(a[i], b[i]) || (Number.isNaN(a[i]) && Number.isNaN(b[i])), `at ${i}: ${a[i]} vs ${b[i]}`);
      continue;
    }
    worst = Math.max(worst, Math.abs(a[i] - b[i]));
  }
  return worst;
}

/** Rows of sequence b of a (B, n, width) tensor: rows [0, count). */
const rowsOf = (x, n, width, b, count) => x.slice(b * n * width, (b * n + count) * width);

for (const dtype of ['float32', 'float16', 'int8']) {
  test(`cache.attend lse (${dtype}): the stateless call's lse over the keys the cache holds, every path`, () => {
    const options = { numHeads: H, sinks: [0.5, -1, 0, 2], window: [24, 0], softcap: 8 };
    const cache = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: 64, dtype });
    try {
      // A tiled prefill (20 rows), a step with a padding row (newTokens), single-token steps.
      for (const [n, newTokens] of [
        [20, undefined],
        [3, [2, 2]],
        [1, undefined],
        [1, undefined],
      ]) {
        const before = cache.lengths;
        const [q, k, v] = [rand(B * n * H * DH), rand(B * n * HKV * DH), rand(B * n * HKV * DH)];
        const { out, lse } = cache.attend(q, k, v, { ...options, lse: true, newTokens });
        const after = cache.lengths;
        for (let b = 0; b < B; b++) {
          const count = after[b] - before[b];
          // Padding rows: lse -inf (and out 0).
          for (let h = 0; h < H; h++) for (let i = count; i < n; i++) assert.equal(lse[(b * H + h) * n + i], -Infinity);
          const held = cache.read();
          const keys = (x) => rowsOf(x, after[b], HKV * DH, b, after[b]);
          const stateLse = new Float32Array(H * count);
          const stateless = mha.multiHeadAttention(
            rowsOf(q, n, H * DH, b, count),
            keys(toFloat(held.k)),
            keys(toFloat(held.v)),
            {
              batch: 1,
              seqLen: count,
              kvSeqLen: after[b],
              dModel: H * DH,
              numHeads: H,
              numKvHeads: HKV,
              causal: true,
              queryOffset: before[b],
              sinks: options.sinks,
              window: options.window,
              softcap: options.softcap,
              lse: stateLse,
            },
          );
          const mine = new Float32Array(H * count);
          for (let h = 0; h < H; h++) mine.set(lse.subarray((b * H + h) * n, (b * H + h) * n + count), h * count);
          assert.ok(maxDiff(mine, stateLse) < 2e-5, `lse of sequence ${b}: ${maxDiff(mine, stateLse)}`);
          assert.ok(maxDiff(rowsOf(out, n, H * DH, b, count), stateless) < 2e-5, `out of sequence ${b}`);
        }
      }
    } finally {
      cache.free();
    }
  });
}

/** A float16 cache reads back the bits as a Uint16Array. */
function toFloat(x) {
  if (x instanceof Float32Array) return x;
  const f = new Float32Array(x.length);
  const view = new DataView(new ArrayBuffer(2));
  for (let i = 0; i < x.length; i++) {
    view.setUint16(0, x[i]);
    const h = view.getUint16(0);
    const e = (h >> 10) & 31;
    const m = h & 1023;
    const s = h >> 15 ? -1 : 1;
    f[i] = e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
  }
  return f;
}

test('cache.attend lse: true, a Float32Array and a HeapTensor give the same bits; out is what it is without lse', () => {
  const [q, k, v] = [rand(B * 2 * H * DH), rand(B * 2 * HKV * DH), rand(B * 2 * HKV * DH)];
  const run = (lse) => {
    const cache = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: 8 });
    try {
      return cache.attend(q, k, v, { numHeads: H, lse });
    } finally {
      cache.free();
    }
  };
  const plain = run(undefined);
  const state = run(true);
  assert.ok(bitsEqual(state.out, plain));
  const array = new Float32Array(B * H * 2);
  assert.ok(bitsEqual(run(array), plain), 'with an lse array, attend returns out');
  assert.ok(bitsEqual(array, state.lse));
  const tensor = mha.allocate(B * H * 2);
  try {
    assert.ok(bitsEqual(run(tensor), plain));
    assert.ok(bitsEqual(tensor.data, state.lse));
  } finally {
    tensor.free();
  }
});

test('cache.attend lse: bad values are precise errors and store nothing', () => {
  const cache = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: DH, capacity: 8 });
  const [q, k, v] = [rand(B * H * DH), rand(B * HKV * DH), rand(B * HKV * DH)];
  // headDim 1: q, out and lse have one length, so only the aliasing rule can refuse them.
  const narrow = mha.createKVCache({ batch: B, numKvHeads: HKV, headDim: 1, capacity: 4 });
  const [tq, tout] = [mha.allocate(B * H), mha.allocate(B * H)];
  const before = mha.memoryStats().heapBytesInUse;
  try {
    expectError(() => cache.attend(q, k, v, { numHeads: H, lse: new Float32Array(7) }), RangeError, [
      'KVCache.attend: lse: expected Float32Array of length 8 (batch*numHeads*n = 2*4*1',
      'got length 7',
    ]);
    expectError(() => cache.attend(q, k, v, { numHeads: H, lse: 'yes' }), TypeError, ['KVCache.attend: lse', '"yes"']);
    {
      const [k1, v1] = [rand(B * HKV), rand(B * HKV)];
      expectError(() => narrow.attend(tq, k1, v1, { numHeads: H, lse: tq }), TypeError, [
        'KVCache.attend: lse: expected a HeapTensor other than q (the kernel reads q while it writes lse), got q itself',
      ]);
      expectError(() => narrow.attend(tq, k1, v1, { numHeads: H, out: tout, lse: tout }), TypeError, [
        'lse: expected a HeapTensor other than out (both are written)',
      ]);
      assert.deepEqual([...narrow.lengths], [0, 0]);
    }
    const shared = new Float32Array(B * H * DH + 8);
    expectError(
      () =>
        cache.attend(q, k, v, {
          numHeads: H,
          out: shared.subarray(0, B * H * DH),
          lse: shared.subarray(B * H * DH - 4, B * H * DH + 4),
        }),
      TypeError,
      ['lse: expected an array that does not overlap out'],
    );
    assert.deepEqual([...cache.lengths], [0, 0]);
    assert.equal(mha.memoryStats().heapBytesInUse, before);
    cache.attend(q, k, v, { numHeads: H, lse: true }); // the cache carries on
    assert.deepEqual([...cache.lengths], [1, 1]);
  } finally {
    [tq, tout].forEach((t) => t.free());
    narrow.free();
    cache.free();
  }
});

const SHAPE = { batch: 2, seqLen: 5, numHeads: 3 };

/** The stateless call over keys [from, to) of k and v, non-causal: its out and lse. */
function statePart(q, k, v, T, from, to, dv) {
  const D = SHAPE.numHeads * 8;
  const slice = (x, width) => {
    const r = new Float32Array(SHAPE.batch * (to - from) * width);
    for (let b = 0; b < SHAPE.batch; b++)
      r.set(x.subarray((b * T + from) * width, (b * T + to) * width), b * (to - from) * width);
    return r;
  };
  const lse = new Float32Array(SHAPE.batch * SHAPE.numHeads * SHAPE.seqLen);
  const out = mha.multiHeadAttention(q, slice(k, D), slice(v, SHAPE.numHeads * dv), {
    ...SHAPE,
    kvSeqLen: to - from,
    dModel: D,
    vHeadDim: dv,
    lse,
  });
  return { out, lse };
}

test('mergeAttention: any split of the keys into parts merges into the whole call', () => {
  const T = 40;
  const dv = 6;
  const q = rand(SHAPE.batch * SHAPE.seqLen * SHAPE.numHeads * 8);
  const k = rand(SHAPE.batch * T * SHAPE.numHeads * 8);
  const v = rand(SHAPE.batch * T * SHAPE.numHeads * dv);
  const whole = statePart(q, k, v, T, 0, T, dv);
  for (const cuts of [[17], [1, 39], [5, 6, 20, 33]]) {
    const bounds = [0, ...cuts, T];
    const parts = bounds.slice(1).map((to, p) => statePart(q, k, v, T, bounds[p], to, dv));
    const merged = mha.mergeAttention(parts, SHAPE);
    assert.ok(maxDiff(merged.out, whole.out) < 1e-6, `out, cuts ${cuts}: ${maxDiff(merged.out, whole.out)}`);
    assert.ok(maxDiff(merged.lse, whole.lse) < 1e-6, `lse, cuts ${cuts}`);
    // The order of the parts changes at most the last bit.
    const reversed = mha.mergeAttention([...parts].reverse(), SHAPE);
    assert.ok(maxDiff(reversed.out, merged.out) < 1e-7);
  }
  // Heap tensors as parts.
  const parts = [statePart(q, k, v, T, 0, 11, dv), statePart(q, k, v, T, 11, T, dv)];
  const tensors = parts.map(({ out, lse }) => {
    const [o, l] = [mha.allocate(out.length), mha.allocate(lse.length)];
    o.set(out);
    l.set(lse);
    return { out: o, lse: l };
  });
  try {
    const fromHeap = mha.mergeAttention(tensors, SHAPE);
    assert.ok(bitsEqual(fromHeap.out, mha.mergeAttention(parts, SHAPE).out));
  } finally {
    for (const t of tensors) [t.out, t.lse].forEach((x) => x.free());
  }
});

test('mergeAttention: an empty part adds nothing (its NaN out too); a row empty everywhere gives out 0, lse -inf', () => {
  const rows = SHAPE.batch * SHAPE.seqLen * SHAPE.numHeads;
  const full = { out: rand(rows * 4), lse: rand(rows) };
  const empty = { out: new Float32Array(rows * 4).fill(NaN), lse: new Float32Array(rows).fill(-Infinity) };
  const merged = mha.mergeAttention([empty, full, empty], SHAPE);
  assert.ok(maxDiff(merged.out, full.out) === 0 && maxDiff(merged.lse, full.lse) < 1e-7);
  const none = mha.mergeAttention([empty, empty], SHAPE);
  assert.ok(none.out.every((x) => Object.is(x, 0)));
  assert.ok(none.lse.every((x) => x === -Infinity));
});

test('mergeAttention: mismatched parts are precise errors', () => {
  const rows = SHAPE.batch * SHAPE.seqLen * SHAPE.numHeads;
  const part = { out: new Float32Array(rows * 4), lse: new Float32Array(rows) };
  expectError(() => mha.mergeAttention([], SHAPE), TypeError, [
    'mergeAttention: parts: expected a non-empty array',
    'got Array(0)',
  ]);
  expectError(() => mha.mergeAttention([part, 3], SHAPE), TypeError, [
    'mergeAttention: parts[1]: expected an attention state',
    'got 3',
  ]);
  expectError(() => mha.mergeAttention([part, { out: new Float32Array(rows * 5), lse: part.lse }], SHAPE), RangeError, [
    'mergeAttention: parts[1].out: expected Float32Array of length 120',
    'vHeadDim from parts[0].out',
    'got length 150',
  ]);
  expectError(() => mha.mergeAttention([{ out: part.out, lse: new Float32Array(rows + 1) }], SHAPE), RangeError, [
    'mergeAttention: parts[0].lse: expected Float32Array of length 30 (batch*numHeads*seqLen = 2*3*5)',
  ]);
  expectError(() => mha.mergeAttention([{ out: new Float32Array(rows * 4 + 1), lse: part.lse }], SHAPE), RangeError, [
    'parts[0].out',
    'times vHeadDim',
  ]);
  expectError(() => mha.mergeAttention([part], { ...SHAPE, numHeads: 0 }), RangeError, ['mergeAttention: numHeads']);
  expectError(() => mha.mergeAttention([part], { ...SHAPE, heads: 3 }), TypeError, [
    'mergeAttention: options',
    'heads',
  ]);
});
