// Issue #32's longest context: how many tokens of a Llama-3.2-1B-shaped KV cache (16 layers, each a cache
// of Hkv 8, Dh 64, B 1) one mha-wasm instance holds, per cache dtype. Not timed: a search over the
// capacity, each probe creating the 16 caches through the public API, stepping them once and freeing them;
// then the longest is filled to its last position and stepped there.
import { LLAMA_1B, tokenHeadBytes } from './jobs.mjs';

// Its own URL of the package, not jobs-common.mjs's: this module also runs in pages (bench/browser/context.mjs).
const distUrl = new URL('../../dist/index.js', import.meta.url).href;

const QUERY_HEADS = 32; // Llama-3.2-1B's query heads: 4 per KV head
const FILL_CHUNK = 32; // tokens per append while filling: small staging, so the caches keep the memory

/** One step of every layer's cache: a token of its own in each, attended over all the cache holds. */
function stepAll(caches, window) {
  const { Hkv, Dh } = LLAMA_1B;
  const q = new Float32Array(QUERY_HEADS * Dh).fill(0.01);
  const kv = new Float32Array(Hkv * Dh).fill(0.02);
  const outs = caches.map((c) => c.attend(q, kv, kv, { numHeads: QUERY_HEADS, ...(window ? { window } : {}) }));
  return outs.every((out) => out.every(Number.isFinite));
}

/**
 * Whether `layers` caches of `capacity` exist at once in `mha` and take a step (the staging and scratch a
 * step needs are part of what must fit); `andFill`: then filled to their last position, stepped there.
 */
function fits(mha, dtype, capacity, andFill = false) {
  const { layers, Hkv, Dh } = LLAMA_1B;
  const caches = [];
  try {
    for (let l = 0; l < layers; l++)
      caches.push(mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity, dtype }));
    if (!andFill) return stepAll(caches);
    // Up to the last position: each chunk's queries see only themselves (window [0, 0]), so filling
    // costs O(capacity); the last step attends over every stored token.
    const q = new Float32Array(FILL_CHUNK * QUERY_HEADS * Dh).fill(0.01);
    const kv = Float32Array.from({ length: FILL_CHUNK * Hkv * Dh }, (_, i) => Math.sin(i));
    for (const c of caches) {
      while (c.length + FILL_CHUNK <= capacity - 1) c.attend(q, kv, kv, { numHeads: QUERY_HEADS, window: [0, 0] });
      while (c.length < capacity - 1) stepAll([c], [0, 0]);
    }
    const start = performance.now();
    const finite = stepAll(caches);
    return finite && { stepMs: performance.now() - start, length: caches[0].length };
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    return false;
  } finally {
    for (const c of caches) c.free();
  }
}

/** The largest capacity (a multiple of 32) for which all layers' caches exist and step at once in `mha`. */
function longestCapacity(mha, dtype) {
  const { layers, Hkv, Dh } = LLAMA_1B;
  const perToken = layers * Hkv * tokenHeadBytes(dtype, Dh);
  let lo = 0; // fits (no caches)
  let hi = Math.ceil(mha.info.maxMemoryBytes / perToken / 32) * 32 + 32; // cannot fit: past the whole memory
  while (hi - lo > 32) {
    const mid = Math.floor((lo + hi) / 64) * 32;
    if (fits(mha, dtype, mid)) lo = mid;
    else hi = mid;
  }
  return { tokens: lo, perToken };
}

/** One row per dtype, each in a fresh instance (its own wasm memory). */
export async function contextRows({ onPhase }) {
  const { createMHA } = await import(distUrl);
  const rows = [];
  for (const dtype of ['float32', 'float16', 'bfloat16', 'int8', 'int4']) {
    onPhase(`context ${dtype}`);
    const mha = await createMHA({ threads: 1 });
    try {
      const { tokens, perToken } = longestCapacity(mha, dtype);
      const stepped = fits(mha, dtype, tokens, true);
      const stats = mha.memoryStats();
      rows.push({
        dtype,
        tokens,
        bytesPerToken: perToken,
        cacheBytes: tokens * perToken,
        wasmMemoryBytes: stats.wasmMemoryBytes,
        maxMemoryBytes: mha.info.maxMemoryBytes,
        steppedAt: stepped ? stepped.length : null,
        lastStepMs: stepped ? stepped.stepMs : null,
        build: mha.info.build,
      });
    } finally {
      mha.dispose();
    }
  }
  return rows;
}
