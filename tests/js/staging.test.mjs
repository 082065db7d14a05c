// Staging of Float32Array arguments in batch groups: a multi-item multiHeadAttention call whose staged
// data pass about 1 MiB is copied to the wasm heap and computed a few batch items at a time. It must give
// the bits of one unsplit kernel call (all-HeapTensor arguments, nothing staged) on every build, with
// masks, causal, self-attention, mixed HeapTensor arguments and every aliasing of out; and calls it
// cannot split (out overlapping an input at another offset, views of the wasm heap) must still be right.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, compare, mulberry32, randomNormal, randomProblem, referenceMHA } from './helpers.mjs';

// Staged bytes per batch item (q, k, v and the mask; the result is written over the staged q) and the
// batch groups they give at 1 MiB:
//   several-per-group: 3 * 96*256*4 + 96*96 = 297 KiB -> groups of 3 items: 3 + 2 (a ragged last group);
//   one-per-group: 3 * 128*512*4 = 768 KiB -> 1 item per group;
//   cross: 64*128*4 + 2 * 600*128*4 + 64*600 = 669 KiB -> 1 item per group.
const SHAPES = [
  { name: 'several-per-group (5,96,96,256,4) + mask', batch: 5, seqLen: 96, kvSeqLen: 96, dModel: 256, numHeads: 4, mask: true },
  { name: 'one-per-group (3,128,128,512,8), causal', batch: 3, seqLen: 128, kvSeqLen: 128, dModel: 512, numHeads: 8, causal: true },
  { name: 'cross (3,64,600,128,2) + mask + causal', batch: 3, seqLen: 64, kvSeqLen: 600, dModel: 128, numHeads: 2, mask: true, causal: true },
];

/** One unsplit kernel call: q, k, v and out on the heap, so nothing is staged and nothing is split. */
function unsplit(instance, q, k, v, options) {
  const tensors = [q, k, v, new Float32Array(q.length)].map((a) => {
    const t = instance.allocate(a.length);
    t.set(a);
    return t;
  });
  const [tq, tk, tv, tout] = tensors;
  instance.multiHeadAttention(tq, tk, tv, { ...options, out: tout });
  const result = tout.toArray();
  for (const t of tensors) t.free();
  return result;
}

for (const [label, createOptions] of [['simd', {}], ['baseline', { simd: false }], ['simd-threads (2 threads)', { threads: 2 }]]) {
  test(`${label}: calls staged in batch groups give the bits of one unsplit call`, async () => {
    const instance = await createMHA(createOptions);
    try {
      let seed = 70;
      for (const s of SHAPES) {
        const { q, k, v, options } = randomProblem(s, seed++);
        const expected = unsplit(instance, q, k, v, options);
        const fresh = instance.multiHeadAttention(q, k, v, options);
        assert.ok(bitsEqual(fresh, expected), `${s.name}: fresh result`);
        const out = new Float32Array(q.length).fill(7);
        assert.equal(instance.multiHeadAttention(q, k, v, { ...options, out }), out);
        assert.ok(bitsEqual(out, expected), `${s.name}: into out`);
        // A HeapTensor among Float32Arrays is read (and out written) at each group's rows.
        const tk = instance.allocate(k.length);
        tk.set(k);
        const tout = instance.allocate(q.length);
        assert.equal(instance.multiHeadAttention(q, tk, v, { ...options, out: tout }), tout.data);
        assert.ok(bitsEqual(tout.data, expected), `${s.name}: HeapTensor k and out`);
        assert.ok(bitsEqual(instance.multiHeadAttention(q, tk, v, options), expected), `${s.name}: HeapTensor k`);
        tk.free();
        tout.free();
      }
      // The right answer, not only a consistent one: the float64 reference on the smallest shape.
      const { q, k, v, options } = randomProblem(SHAPES[2], 72);
      assert.ok(compare(instance.multiHeadAttention(q, k, v, options), referenceMHA(q, k, v, options)).maxError < 2e-5);
    } finally {
      instance.dispose();
    }
  });
}

test('a batched call stages about 1 MiB at a time, not all of its inputs', async () => {
  const instance = await createMHA({ warmup: false });
  const s = SHAPES[1];
  const { q, k, v, options } = randomProblem(s, 80);
  const whole = (q.length + k.length + v.length) * 4; // q (and the result over it), k, v
  const before = instance.memoryStats().heapBytesInUse;
  instance.multiHeadAttention(q, k, v, options);
  const grown = instance.memoryStats().heapBytesInUse - before;
  console.log(`# (3,128,128,512,8): heap grew by ${grown} bytes (staging one item at a time + kernel scratch); whole staging: ${whole}`);
  assert.ok(grown < whole / 2, `staging took ${grown} bytes of ${whole}`);
  assert.ok(grown >= whole / s.batch, `staging took ${grown} bytes, less than one item's ${whole / s.batch}: was anything staged?`);
  instance.dispose();
});

test('self-attention (q === k === v) in batch groups: staged once per group, same bits', async () => {
  const instance = await createMHA();
  const { q: x, options } = randomProblem(SHAPES[1], 81);
  const expected = unsplit(instance, x, x, x, options);
  assert.ok(bitsEqual(instance.multiHeadAttention(x, x, x, options), expected));
  const y = Float32Array.from(x);
  assert.ok(bitsEqual(instance.multiHeadAttention(x, y, x, options), expected), 'v === q, k a copy');
  assert.ok(bitsEqual(instance.multiHeadAttention(x, y, y, options), expected), 'v === k');
  instance.dispose();
});

test('out aliasing q, k or v in a split call: the result is as if computed from the original inputs', async () => {
  const instance = await createMHA();
  for (const s of [SHAPES[0], SHAPES[1]]) {
    const { q, k, v, options } = randomProblem(s, 82);
    const expected = unsplit(instance, q, k, v, options);
    for (const which of ['q', 'k', 'v']) {
      const x = { q: Float32Array.from(q), k: Float32Array.from(k), v: Float32Array.from(v) };
      const result = instance.multiHeadAttention(x.q, x.k, x.v, { ...options, out: x[which] });
      assert.equal(result, x[which]);
      assert.ok(bitsEqual(result, expected), `${s.name}: out aliasing ${which}`);
    }
  }
  instance.dispose();
});

test('out overlapping an input at another offset (not splittable): still computed from the original inputs', async () => {
  const instance = await createMHA();
  const s = SHAPES[0];
  const { q, k, v, options } = randomProblem(s, 83);
  const expected = unsplit(instance, q, k, v, options);
  const item = s.seqLen * s.dModel;
  for (const shift of [item, -item, 1, -3]) {
    // One buffer holds q and, `shift` elements away, out: a group's output would overwrite rows of q
    // that a later group has not read yet (shift > 0), or rows an earlier group already used (shift < 0).
    const pool = new Float32Array(q.length + Math.abs(shift));
    const qAt = shift > 0 ? 0 : -shift;
    pool.set(q, qAt);
    const qView = pool.subarray(qAt, qAt + q.length);
    const out = pool.subarray(qAt + shift, qAt + shift + q.length);
    instance.multiHeadAttention(qView, k, v, { ...options, out });
    assert.ok(bitsEqual(out, expected), `out shifted by ${shift} elements from q`);
    // And overlapping k (same length here: seqLen = kvSeqLen).
    const kPool = new Float32Array(k.length + Math.abs(shift));
    kPool.set(k, qAt);
    const kOut = kPool.subarray(qAt + shift, qAt + shift + q.length);
    instance.multiHeadAttention(q, kPool.subarray(qAt, qAt + k.length), v, { ...options, out: kOut });
    assert.ok(bitsEqual(kOut, expected), `out shifted by ${shift} elements from k`);
  }
  instance.dispose();
});

test('views of the wasm heap (a tensor\'s data) as inputs and out of a large batched call: right bits', async () => {
  const instance = await createMHA();
  const { q, k, v, options } = randomProblem(SHAPES[1], 84);
  const expected = unsplit(instance, q, k, v, options);
  const tq = instance.allocate(q.length);
  tq.set(q);
  const tout = instance.allocate(q.length);
  // Float32Array views of this heap, passed as plain arrays: the call stages them whole.
  const result = instance.multiHeadAttention(tq.data, k, v, { ...options, out: tout.data });
  assert.ok(bitsEqual(result, expected));
  assert.ok(bitsEqual(tout.data, expected));
  tq.free();
  tout.free();
  instance.dispose();
});

// The options of docs/spec.md Part 2 in batch groups: key lengths are staged whole and each kernel call
// reads its items' slice; a bias with a batch dim is staged a group's slice at a time, a broadcast one
// ([1, ...]) once; lse is copied out per group. Staged bytes per item of the first shape: q, k, v (k and v
// of 2 KV heads), the bias [., 4, 96, 96] and lse: 96*256*4 + 2*96*128*4 + 4*96*96*4 + 4*96*4 = 341 KiB
// -> groups of 3 items (3 + 2); the second: 128*512*4 + 2*160*512*4 + 8*128*4 = 900 KiB -> 1 item per group.
const V2_SHAPES = [
  { name: 'GQA 4/2 + kvLengths + per-item bias + lse, emptyRows zero (5,96,96,256)', batch: 5, seqLen: 96, kvSeqLen: 96, dModel: 256,
    numHeads: 4, numKvHeads: 2, kvLengths: [96, 50, 1, 0, 77], biasShape: [5, 4, 96, 96], emptyRows: 'zero' },
  { name: 'broadcast bias [1, 8, S, T] + causal, queryOffset 32, window [40, 0] (3,128,160,512,8)', batch: 3, seqLen: 128,
    kvSeqLen: 160, dModel: 512, numHeads: 8, biasShape: [1, 8, 128, 160], causal: true, queryOffset: 32, window: [40, 0], softcap: 20 },
];

for (const [label, createOptions] of [['simd', {}], ['simd-threads (2 threads)', { threads: 2 }]]) {
  test(`${label}: v2 options staged in batch groups (kvLengths, bias, lse) give the bits of one unsplit call`, async () => {
    const instance = await createMHA(createOptions);
    try {
      let seed = 90;
      for (const s of V2_SHAPES) {
        const { q, k, v, options } = randomProblem(s, seed++);
        const random = mulberry32(seed++);
        options.bias = randomNormal(s.biasShape.reduce((a, b) => a * b), random);
        const lseLength = s.batch * s.numHeads * s.seqLen;
        // Unsplit: every tensor on the heap, nothing staged.
        const tensors = [q, k, v, new Float32Array(q.length), options.bias, new Float32Array(lseLength)].map((a) => {
          const t = instance.allocate(a.length);
          t.set(a);
          return t;
        });
        const [tq, tk, tv, tOut, tBias, tLse] = tensors;
        instance.multiHeadAttention(tq, tk, tv, { ...options, bias: tBias, out: tOut, lse: tLse });
        const [expectedOut, expectedLse] = [tOut.toArray(), tLse.toArray()];
        for (const t of tensors) t.free();
        const lse = new Float32Array(lseLength).fill(12345);
        const out = instance.multiHeadAttention(q, k, v, { ...options, lse });
        assert.ok(bitsEqual(out, expectedOut), `${s.name}: out`);
        assert.ok(bitsEqual(lse, expectedLse), `${s.name}: lse`);
      }
    } finally {
      instance.dispose();
    }
  });
}
