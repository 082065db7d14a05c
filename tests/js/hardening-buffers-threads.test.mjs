// Hardening of the public API, continued from hardening.test.mjs: aliasing, views, shared and detached
// buffers, user code that runs during validation, and instances across worker threads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { createMHA } from '../../dist/index.js';
import { compare, expectError, loadSpecExample, mulberry32, randomNormal, referenceMHA } from './helpers.mjs';

const mha = await createMHA();
const { q, k, v, out64, shape } = loadSpecExample();
const attend = (overrides, qq = q, kk = k, vv = v) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });

/** A Float32Array whose ArrayBuffer has been transferred away (detached): it reads as length 0. */
function detached(TypedArray = Float32Array, length = 120) {
  const array = new TypedArray(length);
  structuredClone(array.buffer, { transfer: [array.buffer] });
  return array;
}

// ---------------------------------------------------------------------------------------------
// 3. Aliasing, views, shared and detached buffers.

test('q === k === v (one tensor for all three) gives self-attention on it', () => {
  const x = Float32Array.from(q);
  const out = mha.multiHeadAttention(x, x, x, { ...shape, causal: true });
  const ref = referenceMHA(x, x, x, { ...shape, causal: true });
  assert.ok(compare(out, ref).maxError < 1e-5);
  assert.deepEqual(x, q, 'the input was modified');
});

test('one array passed as several of q, k, v is staged once and gives the same bits as separate copies', () => {
  const x = Float32Array.from(q);
  const y = Float32Array.from(k);
  const options = { ...shape, causal: true };
  for (const [qq, kk, vv] of [
    [x, x, x],
    [x, x, y],
    [x, y, y],
    [x, y, x],
  ]) {
    const copies = [Float32Array.from(qq), Float32Array.from(kk), Float32Array.from(vv)];
    const expected = mha.multiHeadAttention(copies[0], copies[1], copies[2], options);
    const before = mha.memoryStats().heapBytesInUse;
    assert.deepEqual(mha.multiHeadAttention(qq, kk, vv, options), expected);
    assert.equal(mha.memoryStats().heapBytesInUse, before, 'staging grew');
  }
  assert.deepEqual(x, Float32Array.from(q), 'the input was modified');
});

test('out may alias q, k or v: the result is as if computed from the original inputs (documented)', () => {
  const expected = attend({});
  for (const which of ['q', 'k', 'v', 'qkv']) {
    const x = { q: Float32Array.from(q), k: Float32Array.from(k), v: Float32Array.from(v) };
    if (which === 'qkv') x.k = x.v = x.q;
    const ref = which === 'qkv' ? attend({}, q, q, q) : expected;
    const target = which === 'qkv' ? x.q : x[which];
    const result = mha.multiHeadAttention(x.q, x.k, x.v, { ...shape, out: target });
    assert.equal(result, target, 'options.out is returned');
    assert.deepEqual(result, ref, `out aliasing ${which}`);
  }
});

test('subarray views at odd offsets of larger buffers, as inputs and as out', () => {
  const pool = new Float32Array(1 + 120 * 4 + 3);
  pool.set(q, 1);
  pool.set(k, 121);
  pool.set(v, 241);
  const out = pool.subarray(361, 481);
  const result = mha.multiHeadAttention(pool.subarray(1, 121), pool.subarray(121, 241), pool.subarray(241, 361), {
    ...shape,
    out,
  });
  assert.equal(result, out);
  assert.deepEqual(result, attend({}));
  assert.ok(Number.isNaN(pool[0]) === false && pool[481] === 0, 'wrote outside the out view');
  // A mask that is a view into a bigger Uint8Array too.
  const maskPool = new Uint8Array(7 + 50).fill(1);
  maskPool.fill(0, 7, 9);
  const viaView = attend({ mask: maskPool.subarray(7) });
  const viaCopy = attend({ mask: Uint8Array.from(maskPool.subarray(7)) });
  assert.deepEqual(viaView, viaCopy);
});

test('SharedArrayBuffer-backed inputs, mask and out', () => {
  const shared = (src) => {
    const a = new Float32Array(new SharedArrayBuffer(src.length * 4));
    a.set(src);
    return a;
  };
  const mask = new Uint8Array(new SharedArrayBuffer(50)).fill(1);
  const out = new Float32Array(new SharedArrayBuffer(120 * 4));
  const result = mha.multiHeadAttention(shared(q), shared(k), shared(v), { ...shape, mask, out });
  assert.equal(result, out);
  assert.deepEqual(Array.from(result), Array.from(attend({})));
  assert.deepEqual(Array.from(mha.splitHeads(shared(q), shape)), Array.from(mha.splitHeads(q, shape)));
});

test('a detached buffer is a TypeError naming the argument and the detachment, not a length error', () => {
  for (const [name, thunk] of [
    ['q', () => attend({}, detached())],
    ['out', () => attend({ out: detached() })],
    ['mask', () => attend({ mask: detached(Uint8Array, 50) })],
    ['x', () => mha.splitHeads(detached(), shape)],
    ['xh', () => mha.mergeHeads(detached(), shape)],
  ]) {
    expectError(thunk, TypeError, [`${name}:`, 'detached']);
  }
  // An empty but live array of the wrong length is still a RangeError.
  expectError(() => attend({}, new Float32Array(0)), RangeError, ['q:', 'got length 0']);
});

test('no user code runs while the heap is staged: getters in options or mask entries cannot re-enter', () => {
  // A getter that calls the same instance (with different inputs) while the outer call validates.
  let inner = null;
  const options = { ...shape };
  Object.defineProperty(options, 'causal', {
    enumerable: true,
    get() {
      inner ??= mha.multiHeadAttention(v, v, v, shape);
      return false;
    },
  });
  assert.deepEqual(mha.multiHeadAttention(q, k, v, options), attend({}));
  assert.ok(inner !== null);
  // The same from a boolean[] mask entry: it is read during validation, and must not be read again
  // while q/k/v sit in the staging buffer.
  let reads = 0;
  const mask = new Array(50).fill(true);
  Object.defineProperty(mask, 0, {
    get() {
      reads++;
      mha.multiHeadAttention(v, v, v, shape);
      return true;
    },
  });
  assert.deepEqual(attend({ mask }), attend({}));
  assert.ok(reads >= 1);
});

// ---------------------------------------------------------------------------------------------
// 4. Instances: independent in one thread, correct in several worker threads at once.

test('two instances in one process are independent (interleaved calls, dispose of one)', async () => {
  const a = await createMHA();
  const b = await createMHA();
  const x = randomNormal(3 * 9 * 16, mulberry32(5));
  const o = { batch: 3, seqLen: 9, dModel: 16, numHeads: 4, causal: true };
  const ref = referenceMHA(x, x, x, o);
  for (let i = 0; i < 20; i++) {
    assert.ok(compare(a.multiHeadAttention(x, x, x, o), ref).maxError < 1e-5);
    assert.ok(compare(b.multiHeadAttention(q, k, v, shape), out64).maxError < 1e-5);
    if (i === 10) a.dispose();
  }
  const bHeap = b.memoryStats().heapBytesInUse;
  a.dispose();
  assert.equal(b.memoryStats().heapBytesInUse, bHeap, "disposing one instance changed the other's heap");
  assert.ok(compare(b.multiHeadAttention(q, k, v, shape), out64).maxError < 1e-5);
});

test('an instance cannot be sent to another thread (not cloneable), so it is never shared', () => {
  assert.throws(
    () => structuredClone(mha),
    (e) => e.name === 'DataCloneError',
  );
});

test('instances in 4 worker threads at once each compute the golden example correctly', async () => {
  const url = new URL('../../dist/index.js', import.meta.url).href;
  // CommonJS eval worker: imports the ESM package, runs the example many times, compares with out64.
  const source = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.url).then(async ({ createMHA }) => {
      const mha = await createMHA();
      const { q, k, v, out64, shape, rounds } = workerData;
      let maxError = 0, nanMismatch = 0;
      for (let r = 0; r < rounds; r++) {
        const out = mha.multiHeadAttention(q, k, v, shape);
        for (let i = 0; i < out.length; i++) {
          if (Number.isNaN(out[i]) !== Number.isNaN(out64[i])) nanMismatch++;
          else if (!Number.isNaN(out[i])) maxError = Math.max(maxError, Math.abs(out[i] - out64[i]));
        }
      }
      parentPort.postMessage({ maxError, nanMismatch, simd: mha.info.simd });
    }).catch((e) => parentPort.postMessage({ error: String(e && e.stack || e) }));
  `;
  const run = () =>
    new Promise((resolve, reject) => {
      const worker = new Worker(source, { eval: true, workerData: { url, q, k, v, out64, shape, rounds: 500 } });
      worker.once('message', resolve);
      worker.once('error', reject);
    });
  // The main thread keeps computing while the workers run.
  const results = await Promise.all([
    run(),
    run(),
    run(),
    run(),
    (async () => {
      for (let i = 0; i < 200; i++) assert.ok(compare(attend({}), out64).maxError < 1e-5);
      return { maxError: 0, nanMismatch: 0, simd: mha.info.simd };
    })(),
  ]);
  for (const r of results) {
    assert.equal(r.error, undefined, r.error);
    assert.equal(r.nanMismatch, 0);
    assert.ok(r.maxError < 1e-5, `worker max error ${r.maxError}`);
  }
  assert.equal(results.length, 5);
});
