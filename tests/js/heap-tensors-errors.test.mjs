// Heap tensors (mha.allocate) refused: freed, foreign, mis-sized and aliasing tensors get precise errors
// and leave the instance and its heap as they were; free() and dispose() end tensors; nothing leaks over
// many cycles. The results and memory growth are in heap-tensors.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, compare, expectError, heapCopy, loadSpecExample, mulberry32, randomNormal } from './helpers.mjs';

const mha = await createMHA();
const { q, k, v, out64, shape } = loadSpecExample();

// ---------------------------------------------------------------------------------------------
// Errors: each names the parameter, says what was expected and what was given, and leaves the instance
// working with the heap as it was.

const other = await createMHA();
const t120 = heapCopy(mha, q);
const k120 = heapCopy(mha, k);
const v120 = heapCopy(mha, v);
const out120 = mha.allocate(120);
const t119 = mha.allocate(119);
const foreign = heapCopy(other, q);
const freed = mha.allocate(120);
freed.free();
const attend = (qq, kk, vv, overrides = {}) => mha.multiHeadAttention(qq, kk, vv, { ...shape, ...overrides });

// A memory size the allocation cannot reach although its length passes the checks: malloc returns 0.
const MALLOC_FAIL_LENGTH = 2 ** 30 - 64; // 4 GiB - 256 bytes

// [description, thunk, error class, message fragments]
const BAD_CALLS = [
  // allocate(length)
  [
    'allocate: length missing',
    () => mha.allocate(),
    TypeError,
    ['allocate: length', 'positive integer', 'got undefined'],
  ],
  ['allocate: length a string', () => mha.allocate('120'), TypeError, ['allocate: length', 'got "120"']],
  ['allocate: length a BigInt', () => mha.allocate(120n), TypeError, ['allocate: length', 'got 120']],
  ['allocate: length 0', () => mha.allocate(0), RangeError, ['allocate: length', 'positive integer', 'got 0']],
  ['allocate: length negative', () => mha.allocate(-4), RangeError, ['allocate: length', 'got -4']],
  ['allocate: length fractional', () => mha.allocate(2.5), RangeError, ['allocate: length', 'got 2.5']],
  ['allocate: length NaN', () => mha.allocate(NaN), RangeError, ['allocate: length', 'got NaN']],
  ['allocate: length Infinity', () => mha.allocate(Infinity), RangeError, ['allocate: length', 'got Infinity']],
  ['allocate: length 2^31', () => mha.allocate(2 ** 31), RangeError, ['allocate: length', 'below 2^31']],
  [
    'allocate: 2^30 floats = 4 GiB, beyond the wasm memory',
    () => mha.allocate(2 ** 30),
    RangeError,
    ['allocate: length', '4294967296 bytes of wasm memory', 'can still have', 'may grow to 4294901760 bytes'],
  ],
  [
    'allocate: malloc returns 0',
    () => mha.allocate(MALLOC_FAIL_LENGTH),
    RangeError,
    ['allocate: length', `${MALLOC_FAIL_LENGTH * 4} bytes of wasm memory`],
  ],
  // multiHeadAttention with tensors
  [
    'mha: k tensor one element short',
    () => attend(t120, t119, v120),
    RangeError,
    ['multiHeadAttention: k: expected HeapTensor of length 120 (batch*kvSeqLen*dModel = 2*5*12), got length 119'],
  ],
  [
    'mha: q tensor too short',
    () => attend(t119, k120, v120),
    RangeError,
    ['multiHeadAttention: q:', 'length 120 (batch*seqLen*dModel = 2*5*12)', 'got length 119'],
  ],
  [
    'mha: k tensor, kvSeqLen does not match',
    () => attend(t120, k120, v120, { kvSeqLen: 6 }),
    RangeError,
    ['multiHeadAttention: k: expected HeapTensor of length 144', 'got length 120'],
  ],
  [
    'mha: out tensor too short',
    () => attend(t120, k120, v120, { out: t119 }),
    RangeError,
    ['multiHeadAttention: out:', 'HeapTensor of length 120', 'got length 119'],
  ],
  [
    'mha: q a tensor of another instance',
    () => attend(foreign, k120, v120),
    TypeError,
    ['multiHeadAttention: q:', 'another mha-wasm instance', "this instance's allocate()"],
  ],
  [
    'mha: out a tensor of another instance',
    () => attend(q, k, v, { out: foreign }),
    TypeError,
    ['multiHeadAttention: out:', 'another mha-wasm instance'],
  ],
  [
    'mha: q freed',
    () => attend(freed, k, v),
    TypeError,
    ['multiHeadAttention: q:', 'HeapTensor was freed (by free())'],
  ],
  ['mha: v freed', () => attend(q, k, freed), TypeError, ['multiHeadAttention: v:', 'freed']],
  ['mha: out freed', () => attend(q, k, v, { out: freed }), TypeError, ['multiHeadAttention: out:', 'freed']],
  [
    'mha: out is q',
    () => attend(t120, k120, v120, { out: t120 }),
    TypeError,
    [
      'multiHeadAttention: out: expected a HeapTensor other than q (the kernel reads q while it writes out), got q itself',
    ],
  ],
  ['mha: out is k', () => attend(q, t120, v, { out: t120 }), TypeError, ['out:', 'other than k', 'got k itself']],
  [
    'mha: out is v (q, k arrays)',
    () => attend(q, k, t120, { out: t120 }),
    TypeError,
    ['out:', 'other than v', 'got v itself'],
  ],
  ['mha: out is q = k = v', () => attend(t120, t120, t120, { out: t120 }), TypeError, ['out:', 'other than q']],
  [
    'mha: q a look-alike object',
    () => attend({ length: 120, data: q, set() {}, toArray() {}, free() {} }, k, v),
    TypeError,
    ['multiHeadAttention: q:', 'Float32Array of length 120', 'or a HeapTensor of that length', 'got Object'],
  ],
  [
    'mha: k a Proxy of a tensor',
    () => attend(q, new Proxy(k120, {}), v),
    TypeError,
    ['multiHeadAttention: k:', 'only inherits from HeapTensor', 'Proxy'],
  ],
  [
    'mha: v not a tensor or array',
    () => attend(q, k, 'v'),
    TypeError,
    ['multiHeadAttention: v:', 'or a HeapTensor', 'got "v"'],
  ],
  // methods that take Float32Arrays only
  [
    'splitHeads: x a tensor',
    () => mha.splitHeads(t120, shape),
    TypeError,
    [
      'splitHeads: x: expected Float32Array of length 120',
      'got HeapTensor(120)',
      'only multiHeadAttention takes a HeapTensor; pass its data',
    ],
  ],
  ['mergeHeads: xh a tensor', () => mha.mergeHeads(t120, shape), TypeError, ['mergeHeads: xh:', 'got HeapTensor(120)']],
  [
    'attentionWeights: k a tensor',
    () => mha.attentionWeights(q, k120, shape),
    TypeError,
    ['attentionWeights: k:', 'got HeapTensor(120)'],
  ],
  [
    'splitHeads: x a freed tensor',
    () => mha.splitHeads(freed, shape),
    TypeError,
    ['splitHeads: x:', 'got HeapTensor(120, freed)'],
  ],
  // HeapTensor methods
  [
    'set: source a Float64Array',
    () => t120.set(new Float64Array(3)),
    TypeError,
    ['HeapTensor.set: source: expected a Float32Array, got Float64Array(3)'],
  ],
  ['set: source a plain Array', () => t120.set([1, 2]), TypeError, ['HeapTensor.set: source:', 'got Array(2)']],
  ['set: source a tensor', () => t120.set(k120), TypeError, ['HeapTensor.set: source:', 'got HeapTensor(120)']],
  [
    'set: source too long',
    () => t120.set(new Float32Array(121)),
    RangeError,
    ['HeapTensor.set: source: expected at most 120 elements (length 120 - offset 0), got length 121'],
  ],
  [
    'set: source does not fit at offset',
    () => t120.set(new Float32Array(10), 115),
    RangeError,
    ['HeapTensor.set: source:', 'at most 5 elements', 'offset 115', 'got length 10'],
  ],
  [
    'set: offset negative',
    () => t120.set(new Float32Array(1), -1),
    RangeError,
    ['HeapTensor.set: offset: expected an integer in [0, 120], got -1'],
  ],
  [
    'set: offset past the end',
    () => t120.set(new Float32Array(0), 121),
    RangeError,
    ['HeapTensor.set: offset', 'got 121'],
  ],
  [
    'set: offset fractional',
    () => t120.set(new Float32Array(1), 0.5),
    RangeError,
    ['HeapTensor.set: offset', 'got 0.5'],
  ],
  ['set: offset a string', () => t120.set(new Float32Array(1), '1'), TypeError, ['HeapTensor.set: offset', 'got "1"']],
  [
    'set: source detached',
    () => {
      const a = new Float32Array(4);
      structuredClone(a.buffer, { transfer: [a.buffer] });
      t120.set(a);
    },
    TypeError,
    ['HeapTensor.set: source', 'detached'],
  ],
  [
    'set on a freed tensor',
    () => freed.set(new Float32Array(1)),
    TypeError,
    ['HeapTensor.set: the HeapTensor was freed (by free()); allocate a new one'],
  ],
  ['data of a freed tensor', () => freed.data, TypeError, ['HeapTensor.data:', 'freed (by free())']],
  ['toArray of a freed tensor', () => freed.toArray(), TypeError, ['HeapTensor.toArray:', 'freed']],
];

for (const [description, thunk, ErrorClass, fragments] of BAD_CALLS) {
  test(`bad input: ${description} -> ${ErrorClass.name}`, () => expectError(thunk, ErrorClass, fragments));
}

test('after every bad call the instance gives the golden answer; none changes the heap or leaves a tensor modified', () => {
  const before = mha.memoryStats();
  for (const [description, thunk] of BAD_CALLS) {
    assert.throws(thunk);
    assert.ok(
      compare(mha.multiHeadAttention(t120, k120, v120, { ...shape, out: out120 }), out64).maxError < 1e-5,
      description,
    );
    assert.ok(bitsEqual(t120.data, q), `${description}: q tensor modified`);
  }
  assert.deepEqual(mha.memoryStats(), before);
  assert.equal(t120.length, 120);
  assert.equal(freed.length, 120, 'a freed tensor keeps its length');
});

test('free() is idempotent; a tensor cannot be resized from outside', () => {
  const t = mha.allocate(120);
  t.free();
  t.free();
  expectError(() => t.data, TypeError, ['freed']);
  const live = heapCopy(mha, q);
  assert.throws(
    () => {
      live.length = 12;
    },
    TypeError,
    'length is read-only',
  );
  assert.equal(live.length, 120);
  // The length the call checks is the one allocated: a 120-element tensor is still right for the shape.
  assert.ok(compare(mha.multiHeadAttention(live, k, v, shape), out64).maxError < 1e-5);
  live.free();
});

test('dispose() frees every live tensor of the instance (later uses are TypeErrors); the instance stays usable', async () => {
  const instance = await createMHA({ warmup: false });
  const idle = instance.memoryStats().heapBytesInUse;
  const [tq, tk, tv, tOut] = [q, k, v, new Float32Array(120)].map((a) => heapCopy(instance, a));
  const early = instance.allocate(7);
  early.free();
  instance.multiHeadAttention(tq, tk, tv, { ...shape, out: tOut });
  assert.ok(instance.memoryStats().heapBytesInUse > idle);
  instance.dispose();
  assert.equal(instance.memoryStats().heapBytesInUse, idle, 'dispose() left memory in use');
  expectError(() => tq.data, TypeError, ['HeapTensor.data: the HeapTensor was freed (by dispose())']);
  expectError(() => tOut.set(q), TypeError, ['HeapTensor.set:', 'freed (by dispose())']);
  expectError(() => instance.multiHeadAttention(tq, k, v, shape), TypeError, [
    'multiHeadAttention: q:',
    'freed (by dispose())',
  ]);
  expectError(() => early.data, TypeError, ['freed (by free())']); // freed before: still says by whom
  tq.free(); // harmless after dispose
  // New tensors work after dispose().
  const [nq, nk, nv] = [q, k, v].map((a) => heapCopy(instance, a));
  assert.ok(compare(instance.multiHeadAttention(nq, nk, nv, shape), out64).maxError < 1e-5);
  instance.dispose();
  assert.equal(instance.memoryStats().heapBytesInUse, idle);
});

test('a threaded instance: dispose() frees its tensors and ends its pool; the tensors of another instance are unaffected', async () => {
  const threaded = await createMHA({ threads: 2 });
  const mine = heapCopy(threaded, q);
  const theirs = heapCopy(other, q);
  threaded.dispose();
  assert.equal(threaded.info.threads, 1);
  expectError(() => mine.data, TypeError, ['freed (by dispose())']);
  assert.ok(bitsEqual(theirs.data, q));
  theirs.free();
});

test('no leak: 3,000 allocate/free cycles and 3,000 calls through tensors bring heap use back to the byte', async () => {
  const instance = await createMHA();
  const random = mulberry32(21);
  const s = { batch: 1, seqLen: 33, kvSeqLen: 17, dModel: 64, numHeads: 4 };
  const qa = randomNormal(33 * 64, random);
  const kva = randomNormal(17 * 64, random);
  const round = (i) => {
    const tq = heapCopy(instance, qa);
    const tkv = heapCopy(instance, kva);
    const out = instance.allocate(qa.length);
    const sizes = [1, 3, 4, 5, 16, 1000 + (i % 7) * 333];
    const extra = sizes.map((n) => instance.allocate(n));
    instance.multiHeadAttention(tq, tkv, tkv, { ...s, out });
    instance.multiHeadAttention(tq, kva, tkv, { ...s, causal: true });
    assert.throws(() => instance.multiHeadAttention(tq, tkv, tkv, { ...s, out: tq }), TypeError);
    for (const t of [tq, tkv, out, ...extra]) t.free();
    if (i % 10 === 0) extra[0].free(); // twice
  };
  for (let i = 0; i < 30; i++) round(i); // reach the steady-state arena size first
  const before = instance.memoryStats();
  for (let i = 0; i < 1500; i++) round(i);
  const after = instance.memoryStats();
  console.log(
    `# 3,000 calls, 13,500 allocations: heap in use ${before.heapBytesInUse} -> ${after.heapBytesInUse} B, memory ${before.wasmMemoryBytes} -> ${after.wasmMemoryBytes} B`,
  );
  assert.equal(after.heapBytesInUse, before.heapBytesInUse);
  assert.equal(after.wasmMemoryBytes, before.wasmMemoryBytes);
  instance.dispose();
});

test('tensors kept alive over many calls: live ones are not touched by later allocations and calls', () => {
  const keep = heapCopy(mha, q);
  for (let i = 0; i < 100; i++) {
    const t = mha.allocate(1 + i * 37);
    t.data.fill(i);
    mha.multiHeadAttention(q, k, v, shape);
    if (i % 2) t.free();
  }
  assert.ok(bitsEqual(keep.data, q));
  keep.free();
});

test('user code that runs during validation (an option getter) cannot free a checked tensor or detach a checked array', () => {
  // Option getters are read once, when the option itself is checked: causal and scale come after q, k, v.
  const onFirstRead = (options, key, value, act) => {
    let reads = 0;
    Object.defineProperty(options, key, {
      enumerable: true,
      get() {
        if (++reads === 1) act();
        return value;
      },
    });
    return options;
  };
  for (const which of ['q', 'k', 'v']) {
    const tensors = { q: heapCopy(mha, q), k: heapCopy(mha, k), v: heapCopy(mha, v) };
    const options = onFirstRead({ ...shape }, 'causal', false, () => tensors[which].free());
    expectError(() => mha.multiHeadAttention(tensors.q, tensors.k, tensors.v, options), TypeError, [
      `multiHeadAttention: ${which}: the HeapTensor was freed during validation, by an option getter`,
    ]);
    for (const t of Object.values(tensors)) t.free();
  }
  const arrays = { q: Float32Array.from(q), k: Float32Array.from(k) };
  const options = onFirstRead({ ...shape }, 'scale', 0.5, () =>
    structuredClone(arrays.k.buffer, { transfer: [arrays.k.buffer] }),
  );
  expectError(() => mha.multiHeadAttention(arrays.q, arrays.k, v, options), TypeError, [
    "multiHeadAttention: k: the Float32Array's ArrayBuffer was detached during validation",
  ]);
  const q2 = Float32Array.from(q);
  const weightsOptions = onFirstRead({ ...shape }, 'causal', true, () =>
    structuredClone(q2.buffer, { transfer: [q2.buffer] }),
  );
  expectError(() => mha.attentionWeights(q2, k, weightsOptions), TypeError, [
    'attentionWeights: q:',
    'detached during validation',
  ]);
  // A getter that frees an unrelated tensor is harmless.
  const spare = mha.allocate(3);
  const tq = heapCopy(mha, q);
  const harmless = onFirstRead({ ...shape }, 'causal', false, () => spare.free());
  assert.ok(compare(mha.multiHeadAttention(tq, k, v, harmless), out64).maxError < 1e-5);
  tq.free();
});
