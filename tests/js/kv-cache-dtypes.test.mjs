// The bfloat16, int8 and int4 KV cache dtypes through the TS API (bytes, read, save/load, the refusal of
// non-finite values by int8 and int4).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createMHA } from '../../dist/index.js';

const perTokenPerHead = { float32: 8 * 64, float16: 4 * 64, bfloat16: 4 * 64, int8: 2 * 64 + 8 * 2, int4: 64 + 8 * 2 };

test('cache.bytes and the heap in use match docs/spec.md 4.8 per dtype (B1, Hkv 8, Dh 64, capacity 4096)', async () => {
  const mha = await createMHA();
  // The first cache grows the staging arena and the registry once (about 20 bytes that stay): done here.
  mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 8, capacity: 8 }).free();
  for (const dtype of Object.keys(perTokenPerHead)) {
    const before = mha.memoryStats().heapBytesInUse;
    const cache = mha.createKVCache({ batch: 1, numKvHeads: 8, headDim: 64, capacity: 4096, dtype });
    const expected = 4096 * 8 * perTokenPerHead[dtype];
    assert.equal(cache.bytes, expected, dtype);
    const grew = mha.memoryStats().heapBytesInUse - before;
    assert.ok(
      grew >= expected && grew <= expected + 1024,
      `${dtype}: heap grew ${grew}, expected ${expected} + at most 1 KiB of allocator and registry overhead`,
    );
    cache.free();
    // The storage comes back; the core keeps a few dozen bytes after the first cache of a size (seen: 44,
    // float32 only; not yet explained, see the report): at most 1 KiB stays.
    const kept = mha.memoryStats().heapBytesInUse - before;
    assert.ok(kept >= 0 && kept <= 1024, `${dtype}: ${kept} bytes stay after free`);
  }
  mha.dispose();
});

test('bfloat16, int8 and int4: read gives Float32Array, save/load round-trips bytes, int8 and int4 refuse NaN and stay unchanged', async () => {
  const mha = await createMHA();
  const k = Float32Array.from({ length: 2 * 64 * 3 }, (_, i) => Math.sin(i));
  const q = Float32Array.from({ length: 4 * 64 * 3 }, (_, i) => Math.cos(i));
  for (const dtype of ['bfloat16', 'int8', 'int4']) {
    const cache = mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 64, capacity: 64, dtype });
    cache.attend(q, k, k, { numHeads: 4 });
    const r = cache.read();
    assert.ok(r.k instanceof Float32Array && r.v instanceof Float32Array);
    const saved = cache.save();
    const loaded = mha.loadKVCache(saved);
    assert.equal(loaded.dtype, dtype);
    assert.deepEqual(loaded.save(), saved);
    const q1 = q.subarray(0, 256),
      k1 = k.slice(0, 128);
    assert.deepEqual(loaded.attend(q1, k1, k1, { numHeads: 4 }), cache.attend(q1, k1, k1, { numHeads: 4 }));
    if (dtype === 'int8' || dtype === 'int4') {
      const before = cache.save(),
        heap = mha.memoryStats().heapBytesInUse;
      const bad = k1.slice();
      bad[5] = NaN;
      assert.throws(
        () => cache.attend(q1, bad, k1, { numHeads: 4 }),
        (e) => e instanceof RangeError && /^KVCache\.attend: .*infinite or NaN/.test(e.message),
      );
      assert.deepEqual(cache.save(), before);
      assert.equal(mha.memoryStats().heapBytesInUse, heap);
    }
    cache.free();
    loaded.free();
  }
  assert.throws(
    () => mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 8, capacity: 8, dtype: 'int2' }),
    /createKVCache: dtype: expected 'float32', 'float16', 'bfloat16', 'int8' or 'int4', got/,
  );
  mha.dispose();
});
