// WASM memory stays flat over thousands of mixed good and bad calls (no leak on the wasm heap).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { fullGc, mulberry32, randomNormal } from './helpers.mjs';

test('process.memoryUsage().external is flat over 5,000 mixed good and bad calls (the v3 options among them)', () => {
  return createMHA().then((mha) => {
    const random = mulberry32(7);
    const shapes = [
      { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 },
      { batch: 1, seqLen: 33, kvSeqLen: 17, dModel: 64, numHeads: 4 },
      { batch: 3, seqLen: 8, dModel: 24, numHeads: 2 },
    ];
    const inputs = shapes.map((o) => {
      const T = o.kvSeqLen ?? o.seqLen;
      return {
        o,
        q: randomNormal(o.batch * o.seqLen * o.dModel, random),
        kv: randomNormal(o.batch * T * o.dModel, random),
        mask: new Uint8Array(o.batch * o.seqLen * T).fill(1),
      };
    });
    const halves = inputs.map(({ q, kv }) => [Uint16Array.from(q, () => 0x3c00), Uint16Array.from(kv, () => 0x3800)]);
    const ropes = inputs.map(({ o }) =>
      mha.ropeTables({ rotaryDim: 2, positions: Math.max(o.seqLen, o.kvSeqLen ?? o.seqLen) }),
    );
    const cache = mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 4, capacity: 4, dtype: 'float16' });
    const token = new Uint16Array(8);
    const round = (i) => {
      const { o, q, kv, mask } = inputs[i % inputs.length];
      const [hq, hkv] = halves[i % inputs.length];
      const rope = { ...ropes[i % inputs.length], rotaryDim: 2 };
      const sinks = new Float32Array(o.numHeads);
      switch (i % 15) {
        case 6:
          mha.multiHeadAttention(hq, hkv, hkv, { ...o, dtype: 'float16' });
          break;
        case 7:
          mha.attentionWeights(q, kv, { ...o, stage: 'biased', sinks, rope, causal: true });
          break;
        case 8:
          mha.multiHeadAttention(q, kv, kv, { ...o, sinks });
          break;
        case 9:
          mha.multiHeadAttention(q, kv, kv, { ...o, rope });
          break;
        case 10:
          assert.throws(() => mha.multiHeadAttention(q, kv, kv, { ...o, rope: { ...rope, rotaryDim: 3 } }), RangeError);
          break;
        case 11:
          assert.throws(() => mha.multiHeadAttention(hq, kv, kv, { ...o, dtype: 'float16' }), TypeError);
          break;
        case 12:
          cache.attend(token, token, token, { numHeads: 2, tensorDType: 'float16' });
          if (cache.length === 4) cache.truncate(0);
          break;
        case 13:
          cache.attend(token, token, token, { numHeads: 2, tensorDType: 'float16', sinks: [0, 0] });
          if (cache.length === 4) cache.truncate(0);
          break;
        case 14:
          mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 4, capacity: 4, vHeadDim: 2 }).free();
          break;
      }
      switch (i % 15) {
        case 0:
          mha.multiHeadAttention(q, kv, kv, o);
          break;
        case 1:
          mha.multiHeadAttention(q, kv, kv, { ...o, mask, causal: true });
          break;
        case 2:
          mha.attentionWeights(q, kv, o);
          break;
        case 3:
          mha.mergeHeads(mha.splitHeads(q, { ...o, kvSeqLen: undefined }), { ...o, kvSeqLen: undefined });
          break;
        case 4:
          assert.throws(() => mha.multiHeadAttention(q, kv.subarray(1), kv, o), RangeError);
          break;
        case 5:
          assert.throws(() => mha.multiHeadAttention(q, kv, kv, { ...o, numHeads: 7 }), RangeError);
          break;
      }
    };
    for (let i = 0; i < 300; i++) round(i); // reach the steady-state arena size first
    fullGc();
    const before = process.memoryUsage().external;
    const statsBefore = mha.memoryStats();
    for (let i = 0; i < 5000; i++) round(i);
    fullGc();
    const after = process.memoryUsage().external;
    const statsAfter = mha.memoryStats();
    console.log(
      `# external memory: ${before} -> ${after} bytes; wasm heap in use ${statsBefore.heapBytesInUse} -> ${statsAfter.heapBytesInUse} bytes over 5,000 calls`,
    );
    // The exact measure: malloc'd bytes and the wasm memory size do not change at all.
    assert.equal(statsAfter.heapBytesInUse, statsBefore.heapBytesInUse, 'bytes in use on the wasm heap changed');
    assert.equal(statsAfter.wasmMemoryBytes, statsBefore.wasmMemoryBytes, 'wasm memory grew');
    // The process-level view: with dead arrays collected it stays within a few bytes; any growth of
    // wasm memory (64 KiB pages) or a leaked staging copy would exceed this.
    assert.ok(after - before < 65536, `external memory grew by ${after - before} bytes`);
  });
});

test('dispose() returns staging buffers and scratch to the heap; the instance keeps working', async () => {
  const mha = await createMHA({ warmup: false }); // the warm-up would already have staged buffers
  const o = { batch: 2, seqLen: 64, dModel: 64, numHeads: 4 };
  const x = randomNormal(2 * 64 * 64, mulberry32(3));
  const idle = mha.memoryStats().heapBytesInUse;
  const first = mha.multiHeadAttention(x, x, x, o);
  // q = k = v is staged once: the held staging is (at least) that copy plus out.
  assert.ok(mha.memoryStats().heapBytesInUse >= idle + 2 * x.length * 4, 'staging buffers are held between calls');
  mha.dispose();
  assert.equal(mha.memoryStats().heapBytesInUse, idle);
  assert.deepEqual(mha.multiHeadAttention(x, x, x, o), first);
});
