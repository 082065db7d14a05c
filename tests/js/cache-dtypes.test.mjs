// One source for the KV cache dtypes: the table MHA_CACHE_DTYPES of src/mha/cache/cache_codecs.hpp gives
// the C++ enum and codecs, and web/src/cache-dtypes.generated.ts (scripts/gen-cache-dtypes.mjs). The
// checked-in file is what the table gives; the module knows exactly the table's numbers; the TS layer's
// names and createKVCache's message come from it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import createMhaModule from '../../dist/mha.js';
import { generate, HEADER, nameList, OUTPUT, parseDTypes } from '../../scripts/gen-cache-dtypes.mjs';
import { CACHE_DTYPES } from '../../build/ts/cache-dtype.js';
import { repoRoot } from './helpers.mjs';

const header = fs.readFileSync(path.join(repoRoot, HEADER), 'utf8');
const rows = parseDTypes(header);

test(`${OUTPUT} is what scripts/gen-cache-dtypes.mjs makes of ${HEADER}`, () => {
  assert.equal(
    fs.readFileSync(path.join(repoRoot, OUTPUT), 'utf8'),
    generate(header),
    `${OUTPUT} is stale: run \`node scripts/gen-cache-dtypes.mjs\``,
  );
});

test('the generator refuses a table it cannot read', () => {
  const table = (...lines) => `#define MHA_CACHE_DTYPES(X) \\\n${lines.join(' \\\n')}\n`;
  assert.throws(() => parseDTypes(''), /no #define/);
  assert.throws(() => parseDTypes(table('  X(0, kA, "a", ACodec, 1)')), /expected X\(number/);
  assert.throws(() => parseDTypes(table('  X(0, kA, "a", ACodec, 1, 2)')), /expected X\(number/);
  assert.throws(() => parseDTypes(table('  X(1, kA, "a", ACodec, 1, 0)')), /number 1, expected 0/);
  assert.throws(() => parseDTypes(table('  X(0, kA, "a", ACodec, 1, 0)', '  X(1, kB, "a", BCodec, 1, 1)')), /distinct/);
  assert.equal(nameList(['a', 'b', 'c']), "'a', 'b' or 'c'");
  assert.equal(nameList(['a', 'b'], 'and'), "'a' and 'b'");
});

test('the public lists are the table: kvCacheDTypes in number order, integerArithmeticDTypes its integer rows', async () => {
  const { kvCacheDTypes, integerArithmeticDTypes, createMHA } = await import('../../dist/index.js');
  assert.deepEqual(
    [...kvCacheDTypes],
    rows.map((r) => r.name),
  );
  assert.deepEqual(
    [...integerArithmeticDTypes],
    rows.filter((r) => r.integer).map((r) => r.name),
  );
  assert.ok(Object.isFrozen(kvCacheDTypes) && Object.isFrozen(integerArithmeticDTypes));
  // The core agrees (a load leaves the dtype check to it): exactly these dtypes take integer arithmetic.
  const mha = await createMHA({ threads: 1 });
  try {
    for (const dtype of kvCacheDTypes) {
      const cache = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 32, capacity: 8, dtype });
      const saved = cache.save();
      cache.free();
      const load = () => mha.loadKVCache(saved, { arithmetic: 'integer' });
      if (integerArithmeticDTypes.includes(dtype)) load().free();
      else assert.throws(load, { name: 'TypeError', message: /loadKVCache: arithmetic/ }, dtype);
    }
  } finally {
    mha.dispose();
  }
});

test('the TS layer names the table dtypes by their numbers', () => {
  assert.deepEqual(
    [...CACHE_DTYPES],
    rows.map((r) => r.name),
  );
});

test('the module takes exactly the table numbers as cache dtypes', async () => {
  const wasm = await createMhaModule({ wasmBinary: fs.readFileSync(path.join(repoRoot, 'dist/mha.wasm')) });
  for (const { number, name } of rows) {
    assert.ok(wasm._mha_kv_cache_bytes(1, 1, 64, 32, number, 0) > 0, `${name} (${number})`);
  }
  assert.equal(wasm._mha_kv_cache_bytes(1, 1, 64, 32, rows.length, 0), -1);
});
