// KVCache.save and mha.loadKVCache (docs/spec.md 4.7, docs/cache-format.md) through the API: round trips on
// every build in dist (the relaxed ones in a child Node with Relaxed SIMD) for both dtypes, ragged lengths,
// rope keys and Dv != Dh: the copy holds the same tokens, saves to the same bytes and keeps decoding with
// the original's bits, and every build writes the same bytes; the argument checks; thousands of mutated and
// truncated saves, each refused with an error naming loadKVCache or loaded as exactly what it is, with the
// heap where it was; the bench's shape (4096 float16 tokens of 8 heads of 64): size and time.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, expectError, fullGc, mulberry32, randomNormal, repoRoot, runChild } from './helpers.mjs';
import {
  buildCache,
  continueDecoding,
  expectedSaveBytes,
  roundTrips,
  sha256,
  SPECS,
} from './fixtures/kv-cache-save-scenarios.mjs';

const BUILDS = [
  ['simd', { simd: 'fixed' }],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { simd: 'fixed', threads: 2 }],
];
const savesByBuild = new Map(); // spec name -> [build, sha256 of the save]

for (const [label, createOptions] of BUILDS) {
  const mha = await createMHA(createOptions);
  after(() => mha.dispose());
  for (const spec of SPECS) {
    test(`${label}: ${spec.name}: the loaded copy has the same tokens, saves to the same bytes and decodes with the same bits`, () => {
      const cache = buildCache(mha, spec);
      const bytes = cache.save();
      assert.ok(
        bytes instanceof Uint8Array && bytes.buffer instanceof ArrayBuffer,
        'a Uint8Array of its own (not of the shared heap)',
      );
      assert.equal(
        bytes.length,
        expectedSaveBytes(spec, Array.from(cache.lengths)),
        'header, the stored tokens only, checksum',
      );
      const copy = mha.loadKVCache(bytes);
      assert.deepEqual(copy.lengths, cache.lengths);
      assert.equal(copy.capacity, cache.capacity);
      assert.equal(copy.dtype, cache.dtype);
      const [a, b] = [cache.read(), copy.read()];
      assert.ok(bitsEqual(a.k, b.k) && bitsEqual(a.v, b.v), 'read() of the copy');
      assert.ok(bitsEqual(copy.save(), bytes), 'save() of the copy');
      const [original, loaded] = [continueDecoding(mha, cache, spec), continueDecoding(mha, copy, spec)];
      original.forEach((out, i) => assert.ok(bitsEqual(out, loaded[i]), `decode step ${i} after the load`));
      assert.ok(bitsEqual(copy.save(), cache.save()), 'the saves after decoding');
      const seen = savesByBuild.get(spec.name);
      if (seen === undefined) savesByBuild.set(spec.name, [label, sha256(bytes)]);
      else assert.equal(sha256(bytes), seen[1], `${label} saves other bytes than ${seen[0]}`);
      cache.free();
      copy.free();
    });
  }
}

test('relaxed-simd and relaxed-simd-threads (child Node with Relaxed SIMD): the same round trips, and the same bytes as simd', async () => {
  const scenarios = pathToFileURL(path.join(repoRoot, 'tests/js/fixtures/kv-cache-save-scenarios.mjs')).href;
  const index = pathToFileURL(path.join(repoRoot, 'dist/index.js')).href;
  const source =
    `import { createMHA } from '${index}';\nimport { roundTrips } from '${scenarios}';\n` +
    'const out = {};\nfor (const threads of [1, 2]) {\n  const mha = await createMHA({ threads });\n' +
    '  out[mha.info.build] = roundTrips(mha);\n  mha.dispose();\n}\nconsole.log(JSON.stringify(out));';
  const { code, stdout, stderr } = await runChild(source, {
    nodeFlags: ['--experimental-wasm-relaxed-simd'],
    timeoutMs: 300000,
  });
  assert.equal(code, 0, stderr);
  const results = JSON.parse(stdout.trim().split('\n').at(-1));
  assert.deepEqual(Object.keys(results).sort(), ['relaxed-simd', 'relaxed-simd-threads']);
  const mha = await createMHA({ simd: 'fixed' });
  try {
    const simd = roundTrips(mha);
    for (const [build, rows] of Object.entries(results)) {
      rows.forEach((row, i) => {
        assert.ok(row.sameSave && row.sameDecode, `${build}: ${row.name}: ${JSON.stringify(row)}`);
        assert.equal(row.save, simd[i].save, `${build}: ${row.name}: the save's bytes differ from simd's`);
      });
    }
  } finally {
    mha.dispose();
  }
});

test('a save loads from any Uint8Array view (a subarray at an odd offset, a Node Buffer) and with a larger capacity', async () => {
  const mha = await createMHA();
  try {
    const spec = SPECS[2];
    const cache = buildCache(mha, spec);
    const bytes = cache.save();
    const inside = new Uint8Array(bytes.length + 7);
    inside.set(bytes, 3);
    for (const view of [
      inside.subarray(3, 3 + bytes.length),
      Buffer.from(bytes),
      new Uint8Array(bytes.buffer.slice(0)),
    ]) {
      const copy = mha.loadKVCache(view);
      assert.ok(bitsEqual(copy.save(), bytes));
      copy.free();
    }
    const big = mha.loadKVCache(bytes, { capacity: 500 });
    assert.equal(big.capacity, 500);
    assert.deepEqual(big.lengths, cache.lengths);
    const longest = Math.max(...cache.lengths);
    const tight = mha.loadKVCache(big.save(), { capacity: longest, ...{ unused: undefined } });
    assert.ok(bitsEqual(mha.loadKVCache(tight.save(), { capacity: spec.options.capacity }).save(), bytes));
    // An empty cache.
    const empty = mha.createKVCache({ batch: 3, numKvHeads: 2, headDim: 4, capacity: 9, dtype: 'float16' });
    assert.equal(empty.save().length, 48 + 12 + 4);
    assert.deepEqual(mha.loadKVCache(empty.save()).lengths, new Int32Array(3));
  } finally {
    mha.dispose();
  }
});

test('errors: wrong types and options are TypeErrors, bad values RangeErrors, each naming loadKVCache and the parameter', async () => {
  const mha = await createMHA();
  try {
    const cache = mha.createKVCache({ batch: 2, numKvHeads: 1, headDim: 4, capacity: 16 });
    cache.attend(
      randomNormal(2 * 3 * 8, mulberry32(1)),
      randomNormal(2 * 3 * 4, mulberry32(2)),
      randomNormal(2 * 3 * 4, mulberry32(3)),
      { numHeads: 2, newTokens: [3, 1] },
    );
    const bytes = cache.save();
    const longer = new Uint8Array(bytes.length + 1);
    longer.set(bytes);
    // Warm-up: the staging arena grows to the largest input below, and the registry's table to one entry.
    assert.throws(() => mha.loadKVCache(longer), RangeError);
    mha.loadKVCache(bytes).free();
    const heap = mha.memoryStats().heapBytesInUse;
    for (const bad of [
      [1, 2, 3],
      bytes.buffer,
      new Uint8ClampedArray(bytes),
      new Int8Array(bytes),
      null,
      undefined,
      'bytes',
      new DataView(bytes.buffer),
    ]) {
      expectError(() => mha.loadKVCache(bad), TypeError, ['loadKVCache: bytes: expected a Uint8Array']);
    }
    expectError(() => mha.loadKVCache(new Proxy(bytes, {})), TypeError, ['loadKVCache: bytes: expected a Uint8Array']);
    const detached = bytes.slice();
    structuredClone(detached.buffer, { transfer: [detached.buffer] });
    expectError(() => mha.loadKVCache(detached), TypeError, ['loadKVCache: bytes:', 'detached']);
    expectError(() => mha.loadKVCache(bytes, null), TypeError, ['loadKVCache: options: expected an options object']);
    expectError(() => mha.loadKVCache(bytes, { capcity: 4 }), TypeError, [
      'loadKVCache: options: unknown option "capcity"',
    ]);
    expectError(() => mha.loadKVCache(bytes, { capacity: '4' }), TypeError, [
      'loadKVCache: capacity: expected a positive integer',
    ]);
    for (const capacity of [0, -1, 1.5, 2 ** 31, NaN]) {
      expectError(() => mha.loadKVCache(bytes, { capacity }), RangeError, [
        'loadKVCache: capacity: expected a positive integer',
      ]);
    }
    expectError(() => mha.loadKVCache(bytes, { capacity: 2 }), RangeError, [
      'loadKVCache: capacity: expected at least the longest saved sequence, lengths[0] = 3, got 2',
    ]);
    expectError(() => mha.loadKVCache(bytes, { capacity: 2 ** 30 }), RangeError, [
      'loadKVCache: capacity: a float32 cache of batch 2, numKvHeads 1, headDim 4, vHeadDim 4 and capacity 1073741824 needs',
      'more than it can provide (4 GiB at most)',
      'the instance can still have',
    ]);
    expectError(() => mha.loadKVCache(bytes.subarray(0, 40)), RangeError, [
      'loadKVCache: bytes: 40 bytes, shorter than the smallest',
    ]);
    expectError(() => mha.loadKVCache(new Uint8Array(0)), RangeError, ['loadKVCache: bytes: 0 bytes']);
    const text = new Uint8Array([...bytes.subarray(0, 5), ...bytes.subarray(6)]);
    expectError(() => mha.loadKVCache(text), RangeError, [
      'loadKVCache: bytes: bytes 0..7 are not the mha-wasm KV cache magic',
      'line endings',
    ]);
    const changed = bytes.slice();
    changed[60] ^= 4;
    expectError(() => mha.loadKVCache(changed), RangeError, ['loadKVCache: bytes: checksum mismatch']);
    expectError(() => mha.loadKVCache(longer), RangeError, [
      `loadKVCache: bytes: ${bytes.length + 1} bytes, a cache of these dims and lengths is ${bytes.length} (extra bytes after it?)`,
    ]);
    assert.equal(mha.memoryStats().heapBytesInUse, heap, 'nothing outlives a refused load');
    const freed = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 4, capacity: 4 });
    freed.free();
    expectError(() => freed.save(), TypeError, ['KVCache.save: the KVCache was freed']);
  } finally {
    mha.dispose();
  }
});

// The test's own CRC-32 of docs/cache-format.md (bitwise, from the definition), to re-sign mutated saves so
// that they reach the checks behind the checksum.
function crc32(bytes) {
  let crc = 0xffffffff;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? 0xedb88320 ^ (crc >>> 1) : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
function resign(bytes) {
  if (bytes.length >= 4)
    new DataView(bytes.buffer, bytes.byteOffset).setUint32(bytes.length - 4, crc32(bytes.subarray(0, -4)), true);
  return bytes;
}

/** A mutation of `base` from `random`: byte flips, inserted or removed bytes, a truncation, a header field; half re-signed. */
function mutate(base, random) {
  const int = (n) => Math.floor(random() * n);
  let bytes = base.slice();
  const kind = int(6);
  let header = true; // whether the header may have changed
  if (kind === 0) {
    header = false;
    for (let i = 1 + int(3); i > 0; i--) {
      const at = int(bytes.length);
      bytes[at] ^= 1 + int(255);
      header ||= at < 48;
    }
  } else if (kind === 1) {
    const at = int(bytes.length + 1);
    const extra = Uint8Array.from({ length: 1 + int(4) }, () => int(256));
    bytes = new Uint8Array([...bytes.subarray(0, at), ...extra, ...bytes.subarray(at)]);
  } else if (kind === 2) {
    const at = int(bytes.length);
    bytes = new Uint8Array([...bytes.subarray(0, at), ...bytes.subarray(at + 1 + int(4))]);
  } else if (kind === 3) {
    bytes = bytes.slice(0, int(bytes.length));
  } else {
    // A header word (version, header bytes, dtype, dims, flags, a length) set to a telling value.
    const at = 8 + 4 * int(11);
    // Capacities stay small or far too large: a valid save of a cache of 1 M tokens would take the heap.
    const values = [0, 1, 2, 3, 7, 0xffffffff, 0x7fffffff, 0x80000000, 4096, 65, (int(2 ** 32) | 0x40000000) >>> 0];
    new DataView(bytes.buffer).setUint32(at, values[int(values.length)], true);
  }
  // Re-signed: the header words (kind 4, 5) with the values above, and half of the other changes that leave
  // the header alone. (A re-signed random header could be a valid save of a cache of a billion tokens,
  // which a load must then allocate: it would, but the wasm memory would not shrink back.)
  return kind >= 4 || (!header && random() < 0.5) || (kind !== 0 && random() < 0.1) ? resign(bytes) : bytes;
}

test('mutations: 3000 changed, grown, shrunk and truncated saves are each refused naming loadKVCache or load as exactly what they are; the heap stays put', async () => {
  const mha = await createMHA();
  try {
    const random = mulberry32(3000);
    const bases = [SPECS[5], SPECS[1]].map((spec) => {
      const cache = buildCache(mha, spec);
      cache.truncate(Array.from(cache.lengths, (x) => Math.min(x, 5))); // a few hundred bytes
      const bytes = cache.save();
      cache.free();
      return bytes;
    });
    bases.push(mha.createKVCache({ batch: 2, numKvHeads: 1, headDim: 3, capacity: 4, dtype: 'float16' }).save());
    // Warm-up: the arena's block grows to the largest mutation (4 inserted bytes), a load and a refusal run once.
    const largest = Math.max(...bases.map((b) => b.length)) + 4;
    assert.throws(() => mha.loadKVCache(new Uint8Array(largest)), RangeError);
    // Twice: where emmalloc places a cache's 64-byte aligned blocks settles on the second round (the first
    // leaves 56 bytes more counted in use once, as in kv-cache.test.mjs's memory test).
    for (let round = 0; round < 2; round++) {
      for (const base of bases) {
        mha.loadKVCache(base, { capacity: 4096 }).free();
        mha.loadKVCache(base).free();
      }
    }
    fullGc();
    const before = mha.memoryStats();
    const counts = { loaded: 0, RangeError: 0, TypeError: 0 };
    const reasons = new Map();
    for (let i = 0; i < 3000; i++) {
      const input = mutate(bases[i % bases.length], random);
      // Every third one inside a larger buffer, at an odd offset.
      const view =
        i % 3 === 0
          ? (() => {
              const outer = new Uint8Array(input.length + 5);
              outer.set(input, 1);
              return outer.subarray(1, 1 + input.length);
            })()
          : input;
      let cache;
      try {
        cache = mha.loadKVCache(view);
      } catch (error) {
        assert.ok(error instanceof RangeError || error instanceof TypeError, `${i}: ${error}`);
        assert.match(error.message, /^loadKVCache: (bytes|capacity): ./, `${i}`);
        counts[error.constructor.name]++;
        const reason = error.message.replace(/0x[0-9a-f]+|[0-9]+/g, 'N').slice(0, 60);
        reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
        continue;
      }
      assert.ok(bitsEqual(cache.save(), input), `${i}: a loaded mutation saves to other bytes than it was`);
      counts.loaded++;
      cache.free();
    }
    fullGc();
    const afterRun = mha.memoryStats();
    console.log(
      `# mutations: ${JSON.stringify(counts)}; reasons: ${JSON.stringify(Object.fromEntries([...reasons].sort((a, b) => b[1] - a[1])))}`,
    );
    assert.equal(counts.loaded + counts.RangeError + counts.TypeError, 3000);
    assert.ok(counts.loaded > 0, 'some re-signed changes of token bytes are valid saves');
    assert.equal(afterRun.heapBytesInUse, before.heapBytesInUse, 'heap bytes in use');
    assert.equal(afterRun.wasmMemoryBytes, before.wasmMemoryBytes, 'wasm memory');
    // The instance still works: an attend equals a fresh instance's.
    const fresh = await createMHA();
    try {
      const [q, k, v] = [
        randomNormal(8, mulberry32(5)),
        randomNormal(4, mulberry32(6)),
        randomNormal(4, mulberry32(7)),
      ];
      const run = (m) =>
        m.createKVCache({ batch: 1, numKvHeads: 1, headDim: 4, capacity: 4 }).attend(q, k, v, { numHeads: 2 });
      assert.ok(bitsEqual(run(mha), run(fresh)));
    } finally {
      fresh.dispose();
    }
  } finally {
    mha.dispose();
  }
});

test('the bench shape: 4096 float16 tokens of 8 KV heads of 64 save within 1.01x of the raw tokens and load back', async () => {
  const mha = await createMHA();
  try {
    const [T, Hkv, Dh] = [4096, 8, 64];
    const cache = mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity: T, dtype: 'float16' });
    const random = mulberry32(4096);
    const k = randomNormal(T * Hkv * Dh, random);
    // window [0, 0]: each token sees itself only, so the prefill that fills the cache is cheap.
    cache.attend(randomNormal(T * Hkv * Dh, random), k, randomNormal(T * Hkv * Dh, random), {
      numHeads: Hkv,
      window: [0, 0],
    });
    const raw = T * Hkv * 2 * Dh * 2;
    const time = (f) => {
      const t0 = performance.now();
      const r = f();
      return [performance.now() - t0, r];
    };
    const saves = [],
      loads = [];
    let bytes;
    for (let i = 0; i < 5; i++) {
      const [ms, b] = time(() => cache.save());
      saves.push(ms);
      bytes = b;
      const [loadMs, copy] = time(() => mha.loadKVCache(bytes));
      loads.push(loadMs);
      if (i === 0) assert.ok(bitsEqual(copy.read().k, cache.read().k));
      copy.free();
    }
    const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
    console.log(
      `# ${bytes.length} bytes for ${raw} raw (${(bytes.length / raw).toFixed(6)}x); save ${median(saves).toFixed(1)} ms, ` +
        `load ${median(loads).toFixed(1)} ms (median of 5)`,
    );
    assert.ok(bytes.length <= 1.01 * raw, `${bytes.length} bytes for ${raw} raw`);
    assert.equal(bytes.length, raw + 56);
  } finally {
    mha.dispose();
  }
});
