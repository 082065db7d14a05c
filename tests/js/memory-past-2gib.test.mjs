// Memory past 2 GiB (docs/spec.md 5.6): every build's heap may grow to 4 GiB, and heap tensors, a call's
// staging and caches (attend, read, save, load) placed past 2 GiB give the bits they give below it. The
// module returns such addresses as negative int32s; the TS layer must read each one unsigned.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, heapCopy, randomProblem } from './helpers.mjs';

const GiB = 2 ** 30;
const BUILDS = [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
];
const SHAPE = { batch: 2, seqLen: 7, kvSeqLen: 9, dModel: 32, numHeads: 4, numKvHeads: 2, causal: true };
const CACHE = { batch: 2, numKvHeads: 2, headDim: 8, capacity: 64 };

/** Prefill of 5 tokens, 3 steps, a save and a load and one more step; everything the cache gave. */
function cacheRun(mha, dtype) {
  const rows = (n, heads, seed) =>
    Float32Array.from({ length: 2 * n * heads * 8 }, (_, i) => Math.sin(i * 0.37 + seed));
  const cache = mha.createKVCache({ ...CACHE, dtype });
  const outs = [];
  try {
    outs.push(cache.attend(rows(5, 4, 1), rows(5, 2, 2), rows(5, 2, 3), { numHeads: 4, sinks: [0.5, -1, 0, 2] }));
    for (let s = 0; s < 3; s++)
      outs.push(cache.attend(rows(1, 4, 10 + s), rows(1, 2, 20 + s), rows(1, 2, 30 + s), { numHeads: 4 }));
    const { k, v } = cache.read();
    const saved = cache.save();
    const loaded = mha.loadKVCache(saved);
    try {
      outs.push(loaded.attend(rows(1, 4, 40), rows(1, 2, 41), rows(1, 2, 42), { numHeads: 4, window: [3, 0] }));
    } finally {
      loaded.free();
    }
    return { outs, k, v, saved };
  } finally {
    cache.free();
  }
}

for (const [label, options] of BUILDS) {
  test(`${label}: heap tensors, staging and caches past 2 GiB give the bits they give below it`, async () => {
    const low = await createMHA(options);
    const high = await createMHA(options);
    try {
      assert.equal(high.info.maxMemoryBytes, 4 * GiB - 2 ** 16);
      // 2 GiB that nothing touches (never resident): whatever is allocated next sits past 2 GiB.
      const filler = high.allocate(2 ** 29);
      assert.ok(high.memoryStats().wasmMemoryBytes > 2 * GiB);

      const { q, k, v, options: o } = randomProblem(SHAPE, 20261205);
      const expected = low.multiHeadAttention(q, k, v, o);
      const [tq, tk, tv] = [q, k, v].map((x) => heapCopy(high, x));
      const tOut = high.allocate(expected.length);
      for (const t of [tq, tk, tv, tOut]) assert.ok(t.data.byteOffset >= 2 * GiB, `byteOffset ${t.data.byteOffset}`);
      high.multiHeadAttention(tq, tk, tv, { ...o, out: tOut });
      assert.ok(bitsEqual(tOut.toArray(), expected), 'heap tensors past 2 GiB');
      // Float32Arrays: the staging is allocated after the filler, past 2 GiB too.
      assert.ok(bitsEqual(high.multiHeadAttention(q, k, v, o), expected), 'staging past 2 GiB');
      const lseLength = SHAPE.batch * SHAPE.numHeads * SHAPE.seqLen;
      const [lseHigh, lseLow] = [new Float32Array(lseLength), new Float32Array(lseLength)];
      high.multiHeadAttention(q, k, v, { ...o, lse: lseHigh });
      low.multiHeadAttention(q, k, v, { ...o, lse: lseLow });
      assert.ok(bitsEqual(lseHigh, lseLow), 'lse');

      for (const dtype of ['float32', 'float16', 'int8']) {
        const a = cacheRun(low, dtype);
        const b = cacheRun(high, dtype);
        a.outs.forEach((out, i) => assert.ok(bitsEqual(b.outs[i], out), `${dtype}: attend ${i}`));
        assert.ok(bitsEqual(b.k, a.k) && bitsEqual(b.v, a.v), `${dtype}: read`);
        assert.deepEqual(b.saved, a.saved, `${dtype}: save`);
      }
      [tq, tk, tv, tOut, filler].forEach((t) => t.free());
    } finally {
      low.dispose();
      high.dispose();
    }
  });
}

test('what does not fit is a RangeError that says what it needs and what is left; the instance carries on', async () => {
  const mha = await createMHA();
  try {
    const filler = mha.allocate(3 * 2 ** 28); // 3 GiB
    const left = mha.info.maxMemoryBytes - mha.memoryStats().heapBytesInUse;
    assert.ok(left < GiB + 2 ** 20, `left ${left}`);
    assert.throws(
      () => mha.allocate(2 ** 28 + 2 ** 20),
      (e) =>
        e instanceof RangeError &&
        e.message.includes(
          `allocate: length: a tensor of ${2 ** 28 + 2 ** 20} floats needs ${(2 ** 28 + 2 ** 20) * 4} bytes`,
        ) &&
        /can still have \d+ bytes \(its heap may grow to 4294901760 bytes\)/.test(e.message),
    );
    assert.throws(
      () => mha.createKVCache({ batch: 1, numKvHeads: 8, headDim: 64, capacity: 2 ** 18 }),
      (e) =>
        e instanceof RangeError && e.message.includes('needs 1073741824 bytes') && e.message.includes('can still have'),
    );
    // A small block freed at the top of a 3 GiB heap: the free region a large request is tried against sits
    // where start + size passes 2^32. Emscripten's emmalloc then handed out a block running past 4 GiB
    // (CMakeLists.txt, MHA_EMMALLOC); the modules' emmalloc refuses it.
    for (const small of [16, 4096, 2 ** 16]) {
      mha.allocate(small).free();
      for (const length of [2 ** 28 + 2 ** 20, 2 ** 29]) {
        assert.throws(
          () => mha.allocate(length),
          (e) => e instanceof RangeError && e.message.startsWith(`allocate: length: a tensor of ${length} floats`),
          `${length} floats after a free of ${small}`,
        );
      }
    }
    filler.free();
    // With the 3 GiB back, the same cache fits.
    const cache = mha.createKVCache({ batch: 1, numKvHeads: 8, headDim: 64, capacity: 2 ** 18 });
    cache.free();
  } finally {
    mha.dispose();
  }
});
