// Issue #32's longest context: how many tokens of a Llama-3.2-1B-shaped KV cache (16 layers, each a cache
// of Hkv 8, Dh 64, B 1) one mha-wasm instance holds, per cache dtype. Not timed: a search over the
// capacity, each probe creating the 16 caches through the public API and freeing them.
import { LLAMA_1B, tokenHeadBytes } from './jobs.mjs';

const distUrl = new URL('../../dist/index.js', import.meta.url).href;

/** The largest capacity (a multiple of 32) for which all layers' caches exist at once in `mha`. */
function longestCapacity(mha, dtype) {
  const { layers, Hkv, Dh } = LLAMA_1B;
  const fits = (capacity) => {
    const caches = [];
    try {
      for (let l = 0; l < layers; l++)
        caches.push(mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity, dtype }));
      return true;
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      return false;
    } finally {
      for (const c of caches) c.free();
    }
  };
  const perToken = layers * Hkv * tokenHeadBytes(dtype, Dh);
  let lo = 0; // fits (no caches)
  let hi = Math.ceil(2 ** 32 / perToken / 32) * 32 + 32; // cannot fit: past a 4 GiB memory
  while (hi - lo > 32) {
    const mid = Math.floor((lo + hi) / 64) * 32;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return { tokens: lo, perToken };
}

/** One row per dtype, each in a fresh instance (its own wasm memory). */
export async function contextRows({ onPhase }) {
  const { createMHA } = await import(distUrl);
  const rows = [];
  for (const dtype of ['float32', 'float16', 'bfloat16', 'int8']) {
    onPhase(`context ${dtype}`);
    const mha = await createMHA({ threads: 1 });
    try {
      const { tokens, perToken } = longestCapacity(mha, dtype);
      const stats = mha.memoryStats();
      rows.push({
        dtype,
        tokens,
        bytesPerToken: perToken,
        cacheBytes: tokens * perToken,
        wasmMemoryBytes: stats.wasmMemoryBytes,
        build: mha.info.build,
      });
    } finally {
      mha.dispose();
    }
  }
  return rows;
}
