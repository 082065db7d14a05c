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
  {
    name: 'several-per-group (5,96,96,256,4) + mask',
    batch: 5,
    seqLen: 96,
    kvSeqLen: 96,
    dModel: 256,
    numHeads: 4,
    mask: true,
  },
  {
    name: 'one-per-group (3,128,128,512,8), causal',
    batch: 3,
    seqLen: 128,
    kvSeqLen: 128,
    dModel: 512,
    numHeads: 8,
    causal: true,
  },
  {
    name: 'cross (3,64,600,128,2) + mask + causal',
    batch: 3,
    seqLen: 64,
    kvSeqLen: 600,
    dModel: 128,
    numHeads: 2,
    mask: true,
    causal: true,
  },
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

for (const [label, createOptions] of [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
]) {
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
  console.log(
    `# (3,128,128,512,8): heap grew by ${grown} bytes (staging one item at a time + kernel scratch); whole staging: ${whole}`,
  );
  assert.ok(grown < whole / 2, `staging took ${grown} bytes of ${whole}`);
  assert.ok(
    grown >= whole / s.batch,
    `staging took ${grown} bytes, less than one item's ${whole / s.batch}: was anything staged?`,
  );
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

test("views of the wasm heap (a tensor's data) as inputs and out of a large batched call: right bits", async () => {
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
  {
    name: 'GQA 4/2 + kvLengths + per-item bias + lse, emptyRows zero (5,96,96,256)',
    batch: 5,
    seqLen: 96,
    kvSeqLen: 96,
    dModel: 256,
    numHeads: 4,
    numKvHeads: 2,
    kvLengths: [96, 50, 1, 0, 77],
    biasShape: [5, 4, 96, 96],
    emptyRows: 'zero',
  },
  {
    name: 'broadcast bias [1, 8, S, T] + causal, queryOffset 32, window [40, 0] (3,128,160,512,8)',
    batch: 3,
    seqLen: 128,
    kvSeqLen: 160,
    dModel: 512,
    numHeads: 8,
    biasShape: [1, 8, 128, 160],
    causal: true,
    queryOffset: 32,
    window: [40, 0],
    softcap: 20,
  },
];

for (const [label, createOptions] of [
  ['simd', {}],
  ['simd-threads (2 threads)', { threads: 2 }],
]) {
  test(`${label}: v2 options staged in batch groups (kvLengths, bias, lse) give the bits of one unsplit call`, async () => {
    const instance = await createMHA(createOptions);
    try {
      let seed = 90;
      for (const s of V2_SHAPES) {
        const { q, k, v, options } = randomProblem(s, seed++);
        const random = mulberry32(seed++);
        options.bias = randomNormal(
          s.biasShape.reduce((a, b) => a * b),
          random,
        );
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

// ---------------------------------------------------------------------------------------------
// The pipelined path (instance.ts pipelinedGroups): on a thread pool, a split call stages each group into
// the set the previous group does not use, and copies it out while the next one computes. Every group's
// rows must land where they belong, whatever the group count (odd, even, one), a ragged last group, the
// options and outputs. Staged bytes per item and the groups they give at 1 MiB:
//   (7,64,200,512,8) cross + lse: 64*512*4 + 2*200*512*4 + 8*64*4 = 930 KiB -> 7 groups of 1;
//   (5,128,128,256,4) + mask: 3*128*256*4 + 128*128 = 400 KiB -> groups 2 + 2 + 1;
//   (2,128,128,768,12): 3*128*768*4 = 1.13 MiB -> 2 groups of 1 (bert-base's items);
//   (1,128,128,768,12): one item, never split.
const PIPELINE_SHAPES = [
  {
    name: 'odd group count (7,64,200,512,8), cross, padding mask, causal',
    batch: 7,
    seqLen: 64,
    kvSeqLen: 200,
    dModel: 512,
    numHeads: 8,
    mask: 'padding',
    causal: true,
  },
  {
    name: 'ragged last group (5,128,128,256,4), random mask',
    batch: 5,
    seqLen: 128,
    kvSeqLen: 128,
    dModel: 256,
    numHeads: 4,
    mask: true,
  },
  { name: 'two groups (2,128,128,768,12)', batch: 2, seqLen: 128, kvSeqLen: 128, dModel: 768, numHeads: 12 },
  { name: 'B=1 (1,128,128,768,12), not split', batch: 1, seqLen: 128, kvSeqLen: 128, dModel: 768, numHeads: 12 },
  {
    name: 'GQA 8/2, per-item bias, kvLengths, ALiBi, softcap, window (5,128,128,256,8)',
    batch: 5,
    seqLen: 128,
    kvSeqLen: 128,
    dModel: 256,
    numHeads: 8,
    numKvHeads: 2,
    biasShape: [5, 1, 128, 128],
    kvLengths: [128, 3, 0, 64, 127],
    alibiSlopes: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
    softcap: 15,
    window: [30, 30],
    emptyRows: 'zero',
  },
  {
    name: 'broadcast bias [1, 4, S, T], queryOffset 16, scale 0.3 (3,128,144,512,4)',
    batch: 3,
    seqLen: 128,
    kvSeqLen: 144,
    dModel: 512,
    numHeads: 4,
    biasShape: [1, 4, 128, 144],
    causal: true,
    queryOffset: 16,
    scale: 0.3,
  },
];

/** The out and lse of one unsplit call (every operand a heap tensor, so nothing is staged or split). */
function unsplitWithLse(instance, q, k, v, options) {
  const lseLength = options.batch * options.numHeads * options.seqLen;
  const arrays = [
    q,
    k,
    v,
    new Float32Array(q.length),
    new Float32Array(lseLength),
    options.bias ?? new Float32Array(1),
  ];
  const tensors = arrays.map((a) => {
    const t = instance.allocate(a.length);
    t.set(a);
    return t;
  });
  const [tq, tk, tv, tOut, tLse, tBias] = tensors;
  instance.multiHeadAttention(tq, tk, tv, {
    ...options,
    out: tOut,
    lse: tLse,
    ...(options.bias ? { bias: tBias } : {}),
  });
  const result = { out: tOut.toArray(), lse: tLse.toArray() };
  for (const t of tensors) t.free();
  return result;
}

/** A pipeline shape's inputs, its bias drawn from the same seed. */
function pipelineProblem(s, seed) {
  const problem = randomProblem(s, seed);
  if (s.biasShape)
    problem.options.bias = randomNormal(
      s.biasShape.reduce((a, b) => a * b),
      mulberry32(seed + 1000),
    );
  return problem;
}

test('pipelined batch groups on 2 and 3 threads: the bits of one unsplit call and of 1 thread, every output route', async () => {
  const single = await createMHA();
  try {
    for (const threads of [2, 3]) {
      const instance = await createMHA({ threads });
      try {
        assert.equal(instance.info.threads, threads);
        let seed = 300;
        for (const s of PIPELINE_SHAPES) {
          const { q, k, v, options } = pipelineProblem(s, seed++);
          const label = `${threads} threads, ${s.name}`;
          const expected = unsplitWithLse(instance, q, k, v, options);
          assert.ok(bitsEqual(single.multiHeadAttention(q, k, v, options), expected.out), `${label}: 1 thread`);
          assert.ok(bitsEqual(instance.multiHeadAttention(q, k, v, options), expected.out), `${label}: fresh result`);
          const lse = new Float32Array(expected.lse.length).fill(-7);
          const out = new Float32Array(q.length).fill(7);
          assert.equal(instance.multiHeadAttention(q, k, v, { ...options, out, lse }), out);
          assert.ok(bitsEqual(out, expected.out), `${label}: into out`);
          assert.ok(bitsEqual(lse, expected.lse), `${label}: lse array`);
          // Heap tensors among staged arrays: k read, out and lse written at each group's rows.
          const [tk, tOut, tLse] = [k, out.fill(0), lse.fill(0)].map((a) => {
            const t = instance.allocate(a.length);
            t.set(a);
            return t;
          });
          assert.equal(instance.multiHeadAttention(q, tk, v, { ...options, out: tOut, lse: tLse }), tOut.data);
          assert.ok(bitsEqual(tOut.data, expected.out), `${label}: HeapTensor k, out`);
          assert.ok(bitsEqual(tLse.data, expected.lse), `${label}: HeapTensor lse`);
          for (const t of [tk, tOut, tLse]) t.free();
          // out aliasing an input (the same range): each group's rows are read before they are written.
          for (const which of ['q', 'k', 'v']) {
            if (which !== 'q' && k.length !== q.length) continue;
            const x = { q: Float32Array.from(q), k: Float32Array.from(k), v: Float32Array.from(v) };
            assert.ok(
              bitsEqual(instance.multiHeadAttention(x.q, x.k, x.v, { ...options, out: x[which] }), expected.out),
              `${label}: out aliasing ${which}`,
            );
          }
        }
        // Self-attention, one array as q, k and v (staged once per group).
        const { q: x, options } = pipelineProblem(PIPELINE_SHAPES[1], 320);
        assert.ok(
          bitsEqual(instance.multiHeadAttention(x, x, x, options), unsplitWithLse(instance, x, x, x, options).out),
          `${threads} threads: q === k === v`,
        );
      } finally {
        instance.dispose();
      }
    }
    // The right answer, not only a consistent one.
    const { q, k, v, options } = pipelineProblem(PIPELINE_SHAPES[0], 330);
    const instance = await createMHA({ threads: 2 });
    assert.ok(compare(instance.multiHeadAttention(q, k, v, options), referenceMHA(q, k, v, options)).maxError < 2e-5);
    instance.dispose();
  } finally {
    single.dispose();
  }
});

test('a pipelined call stages two groups at a time, and a refused call leaves the instance working', async () => {
  const s = PIPELINE_SHAPES[0];
  const { q, k, v, options } = pipelineProblem(s, 340);
  const perItem = ((q.length + k.length + v.length) * 4) / s.batch + s.seqLen * s.kvSeqLen;
  /** The heap bytes the first call of a fresh instance takes (staging + each thread's kernel scratch). */
  const firstCallBytes = async (createOptions) => {
    const instance = await createMHA({ ...createOptions, warmup: false });
    const before = instance.memoryStats().heapBytesInUse;
    instance.multiHeadAttention(q, k, v, options);
    const grown = instance.memoryStats().heapBytesInUse - before;
    instance.dispose();
    return grown;
  };
  const one = await firstCallBytes({});
  const two = await firstCallBytes({ threads: 2 });
  console.log(
    `# (7,64,200,512,8), first call: heap grew by ${one} bytes on 1 thread, ${two} on 2 threads; one item stages ${perItem}`,
  );
  // The pipelined call holds a second group (one item here) and a second thread's scratch (far smaller).
  assert.ok(
    two - one >= perItem,
    `2 threads took ${two - one} bytes more than 1: less than a second group of ${perItem}`,
  );
  assert.ok(
    two - one < 1.5 * perItem,
    `2 threads took ${two - one} bytes more than 1: more than a second group of ${perItem} needs`,
  );

  const instance = await createMHA({ threads: 2, warmup: false });
  try {
    const expected = unsplitWithLse(instance, q, k, v, options).out;
    assert.ok(bitsEqual(instance.multiHeadAttention(q, k, v, options), expected));
    // Refused calls (checked before anything is staged) leave the pipeline and the heap as they were.
    const inUse = instance.memoryStats().heapBytesInUse;
    assert.throws(() => instance.multiHeadAttention(q, k.subarray(1), v, options), RangeError);
    assert.throws(() => instance.multiHeadAttention(q, k, v, { ...options, scale: Number.NaN }), RangeError);
    assert.equal(instance.memoryStats().heapBytesInUse, inUse);
    for (let i = 0; i < 3; i++)
      assert.ok(bitsEqual(instance.multiHeadAttention(q, k, v, options), expected), `call ${i} after errors`);
    assert.equal(instance.memoryStats().heapBytesInUse, inUse);
  } finally {
    instance.dispose();
  }
});
