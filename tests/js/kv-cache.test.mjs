// The KV cache (docs/spec.md Part 3) through the API: every `cache` case of the v2 golden set on the
// simd, baseline and threaded builds (1, 2 and 3 threads bit-identical); the property that a prefill and
// any split into steps equals one stateless causal call over the values as read back (every dtype, 2 threads bit for bit); bad inputs
// (a precise error, nothing changed); and memory (long decode loops, create/free cycles).
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import {
  bitsEqual,
  checkOut,
  expectError,
  fullGc,
  goldenV2Dir,
  heapCopy,
  loadGoldenCases,
  mulberry32,
  randomNormal,
  readGolden,
  roundToFloat16,
  sliceRows,
} from './helpers.mjs';
import { runCacheCase, widenHalves } from '../../scripts/lib/golden-runner.mjs';
import { roundAsStored } from '../../scripts/lib/cache-rounding.mjs';

const DTYPES = ['float32', 'float16', 'bfloat16', 'int8'];

const cases = loadGoldenCases(goldenV2Dir).filter((c) => c.kind === 'cache');

test('the v2 golden set has cache cases for both dtypes', () => {
  assert.ok(cases.length >= 3, `found ${cases.length} cache cases`);
  assert.deepEqual(new Set(cases.map((c) => c.cache.dtype)), new Set(['float32', 'float16']));
});

/** Runs a golden cache case through the suites' one cache-case runner; with heap-tensor q, k, v if asked. */
function runCase(mha, c, useHeapTensors = false) {
  const [q, k, v] = ['q', 'k', 'v'].map((role) => readGolden(c, role));
  const staging = useHeapTensors ? { stage: (x) => heapCopy(mha, x), release: (tensor) => tensor.free() } : {};
  const { out, lengths } = runCacheCase(mha, c, q, k, v, staging);
  let total = 0;
  assert.deepEqual(
    lengths,
    c.cache.steps.map((n) => (total += n)),
  );
  return out;
}

const BUILDS = [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (1 thread)', { threads: 1 }],
  ['simd-threads (2 threads)', { threads: 2 }],
  ['simd-threads (3 threads)', { threads: 3 }],
];
const threadOutputs = new Map();

for (const [label, createOptions] of BUILDS) {
  const mha = await createMHA(createOptions);
  after(() => mha.dispose());
  for (const c of cases) {
    test(`${label}: golden ${c.name} (steps ${c.cache.steps.join('+')}, ${c.cache.dtype}) within tolerance of out64`, () => {
      const out = runCase(mha, c);
      const r = checkOut(out, readGolden(c, 'out64'), readGolden(c, 'out32'));
      assert.ok(r.ok, r.problem);
      if (label.startsWith('simd-threads')) {
        const first = threadOutputs.get(c.name);
        if (first === undefined) threadOutputs.set(c.name, out);
        else assert.ok(bitsEqual(out, first), `${label} differs in bits from 1 thread`);
      }
    });
  }
}

test('golden cache cases with heap-tensor q, k, v give the bits of the Float32Array calls', async () => {
  const mha = await createMHA();
  try {
    for (const c of cases) assert.ok(bitsEqual(runCase(mha, c, true), runCase(mha, c)), c.name);
  } finally {
    mha.dispose();
  }
});

/** A random split of `total` tokens into a prefill and steps of 1..4 tokens. */
function randomSteps(total, random) {
  const steps = [1 + Math.floor(random() * total)];
  let left = total - steps[0];
  while (left > 0) {
    const n = Math.min(left, 1 + Math.floor(random() * 4));
    steps.push(n);
    left -= n;
  }
  return steps;
}

test(
  'property: a prefill and random steps equal one stateless causal call over the values as read back ' +
    '(every dtype, GQA, windows, softcap, ALiBi), bit for bit on 2 threads',
  async () => {
    const mha = await createMHA();
    const pool = await createMHA({ threads: 2 });
    try {
      const random = mulberry32(14);
      const worst = {};
      for (let trial = 0; trial < 48; trial++) {
        const B = 1 + Math.floor(random() * 2);
        const Hkv = 1 + Math.floor(random() * 3);
        const H = Hkv * (1 + Math.floor(random() * 3));
        const Dh = [4, 8, 16, 17, 32, 40][Math.floor(random() * 6)];
        const S = 1 + Math.floor(random() * 40);
        const dtype = DTYPES[trial % DTYPES.length];
        const extra = {};
        if (random() < 0.3) extra.window = [Math.floor(random() * 8), Infinity];
        if (random() < 0.2) extra.softcap = 2 + random() * 10;
        if (random() < 0.2) extra.alibiSlopes = Array.from({ length: H }, () => random() * 0.5);
        const q = randomNormal(B * S * H * Dh, random);
        const k = randomNormal(B * S * Hkv * Dh, random);
        const v = randomNormal(B * S * Hkv * Dh, random);
        const capacity = S + Math.floor(random() * 5);
        const steps = randomSteps(S, random);
        const run = (instance) => {
          const cache = instance.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity, dtype });
          const out = new Float32Array(q.length);
          let t = 0;
          for (const n of steps) {
            const step = cache.attend(
              sliceRows(q, B, S, H * Dh, t, n),
              sliceRows(k, B, S, Hkv * Dh, t, n),
              sliceRows(v, B, S, Hkv * Dh, t, n),
              { numHeads: H, ...extra },
            );
            for (let b = 0; b < B; b++)
              out.set(step.subarray(b * n * H * Dh, (b + 1) * n * H * Dh), (b * S + t) * H * Dh);
            t += n;
          }
          const stored = cache.read();
          cache.free();
          return { out, stored };
        };
        const { out, stored } = run(mha);
        const label = `trial ${trial}: B ${B} S ${S} H ${H} Hkv ${Hkv} Dh ${Dh} ${dtype} steps ${steps.join('+')} ${JSON.stringify(extra)}`;
        // The values as read back are the spec's rounding of k and v (docs/spec.md 4.8), computed here on its own.
        const [kStored, vStored] =
          dtype === 'float16' ? [widenHalves(stored.k), widenHalves(stored.v)] : [stored.k, stored.v];
        assert.ok(
          bitsEqual(kStored, roundAsStored(k, dtype, Hkv, Dh)) && bitsEqual(vStored, roundAsStored(v, dtype, Hkv, Dh)),
          `${label}: read() is not k and v rounded as ${dtype} stores them`,
        );
        const expected = mha.multiHeadAttention(q, kStored, vStored, {
          batch: B,
          seqLen: S,
          kvSeqLen: S,
          dModel: H * Dh,
          numHeads: H,
          numKvHeads: Hkv,
          causal: true,
          ...extra,
        });
        let maxError = 0;
        for (let i = 0; i < out.length; i++) maxError = Math.max(maxError, Math.abs(out[i] - expected[i]));
        assert.ok(maxError <= 2e-5, `${label}: max |cache - stateless| = ${maxError}`);
        worst[dtype] = Math.max(worst[dtype] ?? 0, maxError);
        assert.ok(bitsEqual(run(pool).out, out), `${label}: 2 threads differ from 1`);
      }
      console.log(
        `# cache vs stateless over the read-back values, worst max |difference| per dtype over 48 random splits: ${JSON.stringify(worst)}`,
      );
    } finally {
      mha.dispose();
      pool.dispose();
    }
  },
);

test('f16 storage rounds to nearest even and overflows to Infinity (one token attending to itself returns v)', async () => {
  const mha = await createMHA();
  try {
    const values = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519, 65520, 1e-8, -0.1, 2 ** -25 * 3];
    const Dh = values.length;
    const cache = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: Dh, capacity: 1, dtype: 'float16' });
    const v = Float32Array.from(values);
    const out = cache.attend(new Float32Array(Dh), new Float32Array(Dh), v, { numHeads: 1 });
    assert.deepEqual(
      Array.from(out),
      values.map((x) => Math.fround(roundToFloat16(x))),
    );
    assert.equal(out[3], Infinity);
  } finally {
    mha.dispose();
  }
});

test('errors: each bad input gets a precise error and changes nothing', async () => {
  const mha = await createMHA();
  try {
    const create = (o) => () => mha.createKVCache(o);
    const dims = { batch: 1, numKvHeads: 2, headDim: 4, capacity: 4 };
    expectError(create(undefined), TypeError, ['createKVCache: options', 'expected an options object']);
    expectError(create({ ...dims, batch: 0 }), RangeError, ['createKVCache: batch', 'positive integer', 'got 0']);
    expectError(create({ ...dims, headDim: '4' }), TypeError, ['createKVCache: headDim', 'positive integer', 'got']);
    const dtypes = "'float32', 'float16', 'bfloat16', 'int8' or 'int4'";
    expectError(create({ ...dims, dtype: 'int2' }), RangeError, ['createKVCache: dtype', dtypes, 'int2']);
    expectError(create({ ...dims, dtype: 16 }), TypeError, ['createKVCache: dtype', dtypes]);
    expectError(create({ ...dims, length: 3 }), TypeError, ['unknown option "length"']);
    const big = { batch: 4, numKvHeads: 8, headDim: 128, capacity: 1 << 18 };
    const bigBytes = 4 * 8 * 128 * (1 << 18) * 4 * 2;
    expectError(create(big), RangeError, [
      'createKVCache: capacity',
      `needs ${bigBytes} bytes`,
      'the instance can still have',
      'its heap may grow to 4294901760 bytes',
    ]);

    const cache = mha.createKVCache(dims);
    const row = (n, heads) => Float32Array.from({ length: n * heads * 4 }, (_, i) => Math.sin(i + n));
    const first = cache.attend(row(3, 2), row(3, 2), row(3, 2), { numHeads: 2 });
    assert.equal(cache.length, 3);
    const attend = (q, k, v, o) => () => cache.attend(q, k, v, o);
    expectError(attend(row(1, 3), row(1, 2), row(1, 2), { numHeads: 3 }), RangeError, [
      'KVCache.attend: numHeads',
      "multiple of the cache's numKvHeads (2)",
      'got 3',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(2, 2), { numHeads: 2 }), RangeError, [
      'KVCache.attend: v',
      'length 8',
      'got length 16',
    ]);
    expectError(attend(row(1, 2), new Float32Array(5), row(1, 2), { numHeads: 2 }), RangeError, [
      'KVCache.attend: k',
      'got length 5',
    ]);
    expectError(attend(row(2, 2), row(1, 2), row(1, 2), { numHeads: 2 }), RangeError, [
      'KVCache.attend: q',
      'length 8',
      'got length 16',
    ]);
    expectError(attend(row(1, 2), [1, 2], row(1, 2), { numHeads: 2 }), TypeError, [
      'KVCache.attend: k',
      'Float32Array',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, window: [-1, 0] }), RangeError, [
      'KVCache.attend: window',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, softcap: 0 }), RangeError, [
      'KVCache.attend: softcap',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, alibiSlopes: [1] }), RangeError, [
      'KVCache.attend: alibiSlopes',
      'got length 1',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, scale: NaN }), RangeError, [
      'KVCache.attend: scale',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, emptyRows: 'skip' }), RangeError, [
      'KVCache.attend: emptyRows',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, causal: 1 }), TypeError, [
      'KVCache.attend: causal',
      'boolean',
    ]);
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, mask: new Uint8Array(4) }), TypeError, [
      'unknown option "mask"',
    ]);
    // Overflow: 3 + 2 > 4 is refused, and nothing was stored.
    expectError(attend(row(2, 2), row(2, 2), row(2, 2), { numHeads: 2 }), RangeError, [
      'KVCache.attend: k',
      'capacity',
      'length 3 + 2 > capacity 4',
      'nothing was stored',
    ]);
    assert.equal(cache.length, 3);
    expectError(() => cache.truncate(4), RangeError, ['KVCache.truncate: n', '[0, max(lengths) = 3]', 'got 4']);
    expectError(() => cache.truncate('1'), TypeError, ['KVCache.truncate: n']);
    // After every refusal the cache holds what it held: rolling back and redoing gives the same bits.
    cache.truncate(0);
    assert.ok(bitsEqual(cache.attend(row(3, 2), row(3, 2), row(3, 2), { numHeads: 2 }), first));
    const step = cache.attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2 });
    cache.truncate(3);
    expectError(attend(row(2, 2), row(2, 2), row(2, 2), { numHeads: 2 }), RangeError, ['capacity']);
    assert.ok(
      bitsEqual(cache.attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2 }), step),
      'overflow changed the cache',
    );

    cache.free();
    cache.free(); // again: nothing
    expectError(attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2 }), TypeError, [
      'KVCache.attend',
      'freed (by free())',
    ]);
    expectError(() => cache.truncate(0), TypeError, ['KVCache.truncate', 'freed']);

    // Another instance's heap tensor is refused; a disposed instance's cache is freed.
    const other = await createMHA();
    const foreign = heapCopy(other, row(1, 2));
    const c2 = mha.createKVCache(dims);
    expectError(() => c2.attend(foreign, row(1, 2), row(1, 2), { numHeads: 2 }), TypeError, [
      'KVCache.attend: q',
      'another',
    ]);
    assert.equal(c2.length, 0);
    const c3 = other.createKVCache(dims);
    other.dispose();
    expectError(() => c3.attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2 }), TypeError, ['freed (by dispose())']);
    c2.attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2 }); // this instance's cache still works
    assert.equal(c2.length, 1);
    // out: a Float32Array is filled and returned; a HeapTensor out that is q is refused.
    const out = new Float32Array(8);
    assert.equal(c2.attend(row(1, 2), row(1, 2), row(1, 2), { numHeads: 2, out }), out);
    const qt = heapCopy(mha, row(1, 2));
    expectError(() => c2.attend(qt, row(1, 2), row(1, 2), { numHeads: 2, out: qt }), TypeError, [
      'KVCache.attend: out',
      'other than q',
    ]);
    assert.equal(c2.length, 2);
    qt.free();
  } finally {
    mha.dispose();
  }
});

test('memory: 20,000 one-token attend/truncate steps and create/free cycles leave the heap where it started', async () => {
  const mha = await createMHA();
  try {
    const [Hkv, H, Dh] = [2, 4, 16];
    const random = mulberry32(20000);
    const q = randomNormal(H * Dh, random);
    const kv = randomNormal(Hkv * Dh, random);
    const cycle = (dtype) => {
      const c = mha.createKVCache({ batch: 2, numKvHeads: Hkv, headDim: Dh, capacity: 32, dtype });
      c.attend(
        randomNormal(2 * 3 * H * Dh, random),
        randomNormal(2 * 3 * Hkv * Dh, random),
        randomNormal(2 * 3 * Hkv * Dh, random),
        { numHeads: H },
      );
      c.free();
    };
    /** `steps` one-token steps on a fresh cache, rolled back at the capacity, with create/free cycles. */
    const run = (steps) => {
      const cache = mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity: 64 });
      for (let step = 0; step < steps; step++) {
        cache.attend(q, kv, kv, { numHeads: H });
        if (cache.length === 64) cache.truncate(step % 7);
        if (step % 500 === 0) cycle(step % 1000 === 0 ? 'float16' : 'float32');
      }
      cache.free();
    };
    // Warm-up: the decode scratch, the staging arena and the registry's table grow and are kept for reuse.
    // Seen here: the first run leaves 306332 bytes, the second 56 more (once; not yet explained, recorded in
    // the log line below), then 20,000 steps must leave the heap exactly where it was.
    run(1001);
    const afterOne = mha.memoryStats().heapBytesInUse;
    run(1001);
    fullGc();
    console.log(`# heap after one warm-up run ${afterOne}, after two ${mha.memoryStats().heapBytesInUse}`);
    const start = mha.memoryStats().heapBytesInUse;
    run(20000);
    fullGc();
    assert.equal(mha.memoryStats().heapBytesInUse, start);
  } finally {
    mha.dispose();
  }
});
