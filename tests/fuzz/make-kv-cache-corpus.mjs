// Writes the seeds of tests/fuzz/corpus-kv-cache: valid saves (docs/cache-format.md) of small caches, made
// by the built package (npm run build first). Run from the repository: node tests/fuzz/make-kv-cache-corpus.mjs
// The files are committed; rerun only when the format changes (a new version).
import { mkdirSync, writeFileSync } from 'node:fs';
import { createMHA } from '../../dist/index.js';
import { mulberry32, randomNormal } from '../../scripts/lib/prng.mjs';

const dir = new URL('corpus-kv-cache/', import.meta.url);
mkdirSync(dir, { recursive: true });
const mha = await createMHA();
const random = mulberry32(31);

/** A cache of `options`, `steps` attends of [n, newTokens?, extra options] with H = 2 Hkv, saved as `name`. */
function seed(name, options, steps, truncate) {
  const cache = mha.createKVCache(options);
  const { batch: B, numKvHeads: Hkv, headDim: Dh } = options;
  const Dv = options.vHeadDim ?? Dh;
  for (const [n, newTokens, extra] of steps) {
    const scale = extra?.scale ?? 1;
    const k = randomNormal(B * n * Hkv * Dh, random).map((x) => x * scale);
    const v = randomNormal(B * n * Hkv * Dv, random).map((x) => x * scale);
    cache.attend(randomNormal(B * n * 2 * Hkv * Dh, random), k, v, {
      numHeads: 2 * Hkv,
      newTokens,
      ...(extra?.options ?? {}),
    });
  }
  if (truncate) cache.truncate(truncate);
  const bytes = cache.save();
  writeFileSync(new URL(name, dir), bytes);
  console.log(`${name}: ${bytes.length} bytes, lengths ${Array.from(cache.lengths)}`);
  cache.free();
}

seed('f32_b1_empty', { batch: 1, numKvHeads: 1, headDim: 4, capacity: 8 }, []);
seed('f16_b3_empty', { batch: 3, numKvHeads: 2, headDim: 3, capacity: 5, dtype: 'float16', vHeadDim: 2 }, []);
seed(
  'f32_b2_ragged_dv5',
  { batch: 2, numKvHeads: 2, headDim: 3, capacity: 12, vHeadDim: 5 },
  [[4], [3, [1, 3]]],
  [5, 2],
);
seed('f16_b1_panels', { batch: 1, numKvHeads: 1, headDim: 4, capacity: 40, dtype: 'float16' }, [[20], [13]]);
// Values past binary16's range: inf halves (special_from).
seed('f16_b2_specials', { batch: 2, numKvHeads: 1, headDim: 2, capacity: 6, dtype: 'float16' }, [
  [3, undefined, { scale: 1e5 }],
]);
// Version 2 (bfloat16 and int8): the values, then int8's float32 scales per 32-value block.
seed('bf16_b2_ragged', { batch: 2, numKvHeads: 1, headDim: 4, capacity: 9, dtype: 'bfloat16' }, [[3], [2, [2, 1]]]);
seed('int8_b1_blocks', { batch: 1, numKvHeads: 1, headDim: 40, capacity: 36, dtype: 'int8', vHeadDim: 24 }, [
  [20],
  [13],
]);
seed('int8_b2_empty', { batch: 2, numKvHeads: 2, headDim: 32, capacity: 4, dtype: 'int8' }, []);
const rope = mha.ropeTables({ rotaryDim: 4, positions: 16 });
seed('f32_b1_rope', { batch: 1, numKvHeads: 2, headDim: 4, capacity: 16 }, [[5, undefined, { options: { rope } }]]);
// Version 3 (ring caches): the stored counts after the lengths; tokens wrapped past the capacity, ragged,
// one sequence truncated below its capacity.
const ringSteps = (n) => Array.from({ length: n }, () => [3, undefined, { options: { window: [4, 0] } }]);
seed('f32_b2_ring', { batch: 2, numKvHeads: 1, headDim: 4, capacity: 8, ring: true }, ringSteps(5), [14, 12]);
seed('int8_b1_ring', { batch: 1, numKvHeads: 1, headDim: 40, capacity: 7, dtype: 'int8', ring: true }, ringSteps(4));
seed('f16_b1_ring_empty', { batch: 1, numKvHeads: 2, headDim: 3, capacity: 5, dtype: 'float16', ring: true }, []);
// Version 4 (int4): two values a byte, the scales as int8's; an odd head dim (a lone nibble per row), ragged,
// and a ring.
seed('int4_b2_ragged_odd', { batch: 2, numKvHeads: 2, headDim: 37, capacity: 36, dtype: 'int4', vHeadDim: 24 }, [
  [20],
  [13, [13, 5]],
]);
seed('int4_b1_ring', { batch: 1, numKvHeads: 1, headDim: 40, capacity: 7, dtype: 'int4', ring: true }, ringSteps(4));
mha.dispose();
