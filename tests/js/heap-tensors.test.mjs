// Heap tensors (mha.allocate): multiHeadAttention with q, k, v and out on the wasm heap gives the same
// bits as with Float32Arrays on every build and copies and allocates nothing; views follow memory growth.
// Freed, foreign, mis-sized and aliasing tensors and the tensors' lifecycle: heap-tensors-errors.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, compare, heapCopy, loadSpecExample, randomProblem, referenceMHA } from './helpers.mjs';

const mha = await createMHA();
const { q, k, v, out64, shape } = loadSpecExample();

// Shapes: the spec example, cross-attention, and one large enough for the threaded build to split it.
const SHAPES = [
  { name: 'spec example (2,5,5,12,3)', batch: 2, seqLen: 5, dModel: 12, numHeads: 3 },
  {
    name: 'cross, causal + mask (2,9,13,16,4)',
    batch: 2,
    seqLen: 9,
    kvSeqLen: 13,
    dModel: 16,
    numHeads: 4,
    causal: true,
    mask: true,
  },
  { name: 'parallel-sized (2,130,130,256,4)', batch: 2, seqLen: 130, kvSeqLen: 130, dModel: 256, numHeads: 4 },
];

// ---------------------------------------------------------------------------------------------
// Results

for (const [label, createOptions] of [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
]) {
  test(`${label}: HeapTensor and mixed arguments give the Float32Array path's bits`, async () => {
    const instance = await createMHA(createOptions);
    try {
      assert.equal(instance.info.build, label.split(' ')[0]);
      let seed = 40;
      for (const s of SHAPES) {
        const { q: qa, k: ka, v: va, options } = randomProblem(s, seed++);
        const expected = instance.multiHeadAttention(qa, ka, va, options);
        if (s.batch * s.seqLen <= 100) {
          // The expected output is right, so equal bits mean a right answer.
          const r = compare(expected, referenceMHA(qa, ka, va, options));
          assert.equal(r.specialMismatch, -1, s.name);
          assert.ok(r.maxError < 1e-4, `${s.name}: ${r.maxError}`);
        }
        const [tq, tk, tv] = [qa, ka, va].map((a) => heapCopy(instance, a));
        const tOut = instance.allocate(qa.length);
        const fOut = new Float32Array(qa.length);
        // [q, k, v, out] per case: all on the heap, and mixes of both kinds in every position.
        const cases = [
          [tq, tk, tv, tOut],
          [tq, tk, tv, undefined],
          [tq, ka, tv, fOut],
          [qa, tk, va, tOut],
          [tq, ka, va, undefined],
          [qa, ka, tv, tOut],
        ];
        for (const [cq, ck, cv, out] of cases) {
          const what = `${s.name}: q ${cq === qa ? 'array' : 'tensor'}, k ${ck === ka ? 'array' : 'tensor'}, v ${cv === va ? 'array' : 'tensor'}, out ${out === undefined ? 'none' : out === fOut ? 'array' : 'tensor'}`;
          tOut.set(new Float32Array(qa.length).fill(NaN));
          const result = instance.multiHeadAttention(cq, ck, cv, { ...options, out });
          assert.ok(bitsEqual(result, expected), what);
          if (out === tOut) {
            assert.ok(result === tOut.data, `${what}: returns the out tensor's data view`);
            assert.ok(bitsEqual(tOut.toArray(), expected), `${what}: the tensor holds the result`);
          }
          if (out === fOut) assert.ok(result === fOut, `${what}: returns the Float32Array out`);
        }
        for (const t of [tq, tk, tv, tOut]) t.free();
      }
    } finally {
      instance.dispose();
    }
  });
}

test('q = k = v as one tensor (self-attention), with causal and with a mask, equals the Float32Array path', () => {
  const x = heapCopy(mha, q);
  const out = mha.allocate(q.length);
  const mask = Uint8Array.from({ length: 50 }, (_, i) => (i % 3 === 0 ? 0 : 1));
  for (const extra of [{}, { causal: true }, { mask }, { mask, causal: true }, { scale: 0.25 }]) {
    const expected = mha.multiHeadAttention(q, q, q, { ...shape, ...extra });
    assert.ok(compare(expected, referenceMHA(q, q, q, { ...shape, ...extra })).maxError < 1e-5, JSON.stringify(extra));
    assert.ok(
      bitsEqual(mha.multiHeadAttention(x, x, x, { ...shape, ...extra }), expected),
      `new array, ${JSON.stringify(Object.keys(extra))}`,
    );
    assert.ok(
      bitsEqual(mha.multiHeadAttention(x, x, x, { ...shape, ...extra, out }), expected),
      `out tensor, ${JSON.stringify(Object.keys(extra))}`,
    );
  }
  assert.ok(bitsEqual(x.toArray(), q), 'the input tensor was modified');
  x.free();
  out.free();
});

test('the golden example through tensors is within 1e-5 of PyTorch float64', () => {
  const [tq, tk, tv, tOut] = [q, k, v, new Float32Array(120)].map((a) => heapCopy(mha, a));
  const r = compare(mha.multiHeadAttention(tq, tk, tv, { ...shape, out: tOut }), out64);
  assert.ok(r.maxError < 1e-5, `max error ${r.maxError}`);
  for (const t of [tq, tk, tv, tOut]) t.free();
});

test('the kernel reads tensors in place: writes through data or set() change the next result', () => {
  const [tq, tk, tv] = [q, k, v].map((a) => heapCopy(mha, a));
  const first = mha.multiHeadAttention(tq, tk, tv, shape);
  tv.data.fill(2);
  const allTwo = mha.multiHeadAttention(tq, tk, tv, shape);
  assert.ok(
    allTwo.every((x) => Math.abs(x - 2) < 1e-6),
    'softmax weights sum to 1, so v = 2 everywhere gives 2',
  );
  tv.set(v);
  assert.ok(bitsEqual(mha.multiHeadAttention(tq, tk, tv, shape), first));
  for (const t of [tq, tk, tv]) t.free();
});

test('with q, k, v and out all tensors a call stages nothing: heap use grows by kernel scratch only, then stays flat', async () => {
  const instance = await createMHA({ warmup: false }); // the warm-up would already have staged buffers
  // One batch item: a multi-item call could be staged a group of items at a time (staging.test.mjs).
  const s = { batch: 1, seqLen: 512, dModel: 256, numHeads: 4 };
  const { q: qa, k: ka, v: va } = randomProblem(s, 9);
  const tensors = [qa, ka, va, new Float32Array(qa.length)].map((a) => heapCopy(instance, a));
  const [tq, tk, tv, tOut] = tensors;
  const before = instance.memoryStats().heapBytesInUse;
  instance.multiHeadAttention(tq, tk, tv, { ...s, out: tOut });
  const scratch = instance.memoryStats().heapBytesInUse - before;
  console.log(`# first all-tensor call: ${scratch} bytes of kernel scratch allocated, nothing staged`);
  // Staging any one tensor would take 512 KiB; the scratch depends on the head size only.
  assert.ok(scratch < qa.length * 4, `an all-tensor call allocated ${scratch} bytes`);
  const steady = instance.memoryStats();
  for (let i = 0; i < 20; i++) instance.multiHeadAttention(tq, tk, tv, { ...s, out: tOut });
  assert.deepEqual(instance.memoryStats(), steady);
  // The same call with Float32Arrays stages q, k and v (the result is written over the staged q): the
  // comparison that makes the check above meaningful. Its arena replaces the one that held only the call
  // struct (staging.ts), which is freed: the growth is the three inputs less that small block, whose size
  // depends on the allocator's placement (1 KiB bounds it).
  instance.multiHeadAttention(qa, ka, va, s);
  const staged = instance.memoryStats().heapBytesInUse - steady.heapBytesInUse;
  assert.ok(
    staged >= 3 * qa.length * 4 - 1024,
    `the Float32Array path staged ${staged} bytes, less than its three inputs`,
  );
  instance.dispose();
});

// ---------------------------------------------------------------------------------------------
// Views and memory growth

test('allocate: 16-byte aligned, the requested length, contents writable through data and set()', () => {
  const tensors = [];
  for (let length = 1; length <= 40; length++) {
    const t = mha.allocate(length);
    tensors.push(t);
    assert.equal(t.length, length);
    assert.equal(t.data.length, length);
    assert.equal(t.data.byteOffset % 16, 0, `length ${length}: byte offset ${t.data.byteOffset}`);
    t.set(Float32Array.from({ length }, (_, i) => i + length));
  }
  // No two tensors overlap: each still holds its own values.
  for (const t of tensors) {
    assert.deepEqual(
      Array.from(t.data),
      Array.from({ length: t.length }, (_, i) => i + t.length),
    );
    t.free();
  }
});

test('set(source, offset) writes only [offset, offset + source.length); toArray() is an independent copy', () => {
  const t = mha.allocate(6);
  t.set(new Float32Array(6));
  t.set(Float32Array.of(1, 2), 3);
  t.set(new Float32Array(0), 6); // an empty source fits at the end
  assert.deepEqual(Array.from(t.data), [0, 0, 0, 1, 2, 0]);
  const copy = t.toArray();
  copy[0] = 9;
  assert.equal(t.data[0], 0);
  assert.ok(copy.buffer !== t.data.buffer, 'toArray() returned a heap view');
  t.free();
});

test('data is cached while the memory does not change, and re-created on the grown memory after growth (simd build)', () => {
  const t = heapCopy(mha, q);
  const view = t.data;
  assert.ok(t.data === view, 'same view while the memory is unchanged');
  const before = mha.memoryStats().wasmMemoryBytes;
  const big = mha.allocate(before / 4); // as many floats as the memory has bytes / 4: it must grow
  try {
    assert.ok(mha.memoryStats().wasmMemoryBytes > before, 'the memory did not grow');
    assert.equal(view.length, 0, 'the old view is detached');
    assert.ok(t.data !== view, 'data still returns the detached view');
    assert.equal(t.data.buffer.byteLength, mha.memoryStats().wasmMemoryBytes);
    assert.ok(bitsEqual(t.data, q), 'the values survived growth');
  } finally {
    big.free();
    t.free();
  }
});

test('threaded build (shared memory): after growth the old view keeps the old, shorter buffer; data moves to the new one', async () => {
  const instance = await createMHA({ threads: 2 });
  try {
    const t = heapCopy(instance, q);
    const view = t.data;
    const before = instance.memoryStats().wasmMemoryBytes;
    const big = instance.allocate(before / 4);
    assert.ok(instance.memoryStats().wasmMemoryBytes > before);
    assert.equal(view.buffer.byteLength, before, 'a SharedArrayBuffer is not detached: the old view keeps its length');
    assert.ok(t.data.buffer !== view.buffer, 'data still returns a view of the old buffer');
    assert.equal(t.data.buffer.byteLength, instance.memoryStats().wasmMemoryBytes);
    assert.ok(bitsEqual(t.data, q));
    big.free();
    t.free();
  } finally {
    instance.dispose();
  }
});

// A call whose own staging malloc grows the memory detaches every view of it, including a tensor's data
// passed as a Float32Array argument. Shapes: q and out 6 MiB each (S = 2^17 rows of 12), k and v tiny.
const GROWTH_SHAPE = { batch: 1, seqLen: 2 ** 17, kvSeqLen: 5, dModel: 12, numHeads: 3 };
const growthInputs = randomProblem(GROWTH_SHAPE, 77);

/**
 * A fresh instance whose 16 MiB memory is nearly filled by two 6 MiB tensors, so that staging even one
 * more 6 MiB array must grow it; `body` makes the call and returns what to check.
 */
async function withFullMemory(body) {
  const instance = await createMHA({ warmup: false });
  try {
    const tensors = {
      q: heapCopy(instance, growthInputs.q),
      k: heapCopy(instance, growthInputs.k),
      v: heapCopy(instance, growthInputs.v),
      out: instance.allocate(growthInputs.q.length),
    };
    const before = instance.memoryStats().wasmMemoryBytes;
    await body(instance, tensors);
    assert.ok(
      instance.memoryStats().wasmMemoryBytes > before,
      'the call did not grow the memory, so nothing was tested',
    );
  } finally {
    instance.dispose();
  }
}

for (const which of ['q', 'k', 'v', 'out']) {
  test(`a tensor's data passed as the Float32Array ${which} survives the memory growth of its own call`, async () => {
    const { q: qa, k: ka, v: va, options } = growthInputs;
    const expected = mha.multiHeadAttention(qa, ka, va, options);
    await withFullMemory((instance, tensors) => {
      const view = tensors[which].data;
      if (which === 'out') view.fill(NaN);
      const args = { q: qa, k: ka, v: va, [which]: view };
      const result = instance.multiHeadAttention(args.q, args.k, args.v, {
        ...options,
        out: which === 'out' ? view : undefined,
      });
      assert.equal(view.length, 0, 'the call did not detach the view, so nothing was tested');
      assert.ok(bitsEqual(result, expected), `${which}: wrong result`);
      if (which === 'out') {
        assert.ok(
          result.buffer === tensors.out.data.buffer,
          'out: the returned array is not a view of the current memory',
        );
        assert.equal(result.byteOffset, tensors.out.data.byteOffset, 'out: the returned view is not where out was');
        assert.ok(bitsEqual(tensors.out.data, expected), 'out: the tensor does not hold the result');
      }
    });
  });
}

test('a Uint8Array mask that views the heap survives the memory growth of its own call', async () => {
  const { q: qa, k: ka, v: va, options } = growthInputs;
  const maskLength = options.batch * options.seqLen * options.kvSeqLen;
  const pattern = Uint8Array.from({ length: maskLength }, (_, i) => (i % 7 === 3 ? 0 : 1));
  const expected = mha.multiHeadAttention(qa, ka, va, { ...options, mask: pattern });
  await withFullMemory((instance) => {
    const holder = instance.allocate(maskLength / 4);
    const view = new Uint8Array(holder.data.buffer, holder.data.byteOffset, maskLength);
    view.set(pattern);
    const result = instance.multiHeadAttention(qa, ka, va, { ...options, mask: view });
    assert.equal(view.length, 0, 'the call did not detach the mask, so nothing was tested');
    assert.ok(bitsEqual(result, expected), 'the mask was not staged from where it is');
  });
});

test("a tensor's data passed to splitHeads and attentionWeights survives the memory growth of the call", async () => {
  const { q: qa, k: ka, options } = growthInputs;
  // q's 2^17 x 12 floats read as (1, 2^15, 48): splitHeads also limits seqLen^2 to 2^31.
  const headShape = { batch: 1, seqLen: 2 ** 15, dModel: 48, numHeads: 3 };
  const expectedSplit = mha.splitHeads(qa, headShape);
  const expectedWeights = mha.attentionWeights(qa, ka, { ...options, mask: undefined });
  await withFullMemory((instance, tensors) => {
    const view = tensors.q.data;
    assert.ok(bitsEqual(instance.splitHeads(view, headShape), expectedSplit));
    assert.equal(view.length, 0, 'splitHeads did not detach the view, so nothing was tested');
  });
  await withFullMemory((instance, tensors) => {
    const view = tensors.q.data;
    assert.ok(
      bitsEqual(instance.attentionWeights(view, tensors.k.data, { ...options, mask: undefined }), expectedWeights),
    );
    assert.equal(view.length, 0, 'attentionWeights did not detach the view, so nothing was tested');
  });
});
