// The attention backend of the tiny-gpt runner (runner.mjs): it holds the K/V of every layer of one
// sequence in mha-wasm KV caches and runs causal attention over them. The interface (AttentionBackend) is documented
// in runner.mjs. Plain ESM importing only scripts/lib/float16.mjs (itself import-free), for Node, pages and
// Workers alike; the caller passes the mha-wasm instance in. Any cache dtype of the package works.
//
// Shapes, with the letters of docs/spec.md (B = 1): S new tokens of one call (n in the code), T tokens
// held, H query heads, Hkv KV heads, Dh head size, D = H * Dh.

import { float16Value } from '../../scripts/lib/float16.mjs';

/**
 * The backend: one `mha.createKVCache` per layer (docs/spec.md Part 3), the Hkv-wide K/V passed as they are
 * (grouped-query attention, Part 2.1: query head h reads KV head floor(h / (H / Hkv)) in place). A prefill
 * and a decode step are the same call, `cache.attend`, causal with query positions starting at the length.
 *
 * `weights` (for the demo's heatmaps and the head scores): the cache has no weights-over-the-cache call,
 * so this backend also keeps each layer's K rows in JS, as the cache stores them (read back after each
 * attend: the dtype's rounding, exactly; Hkv*Dh floats per token and layer, a copy that costs far less
 * than the attend), and
 * calls `mha.attentionWeights` with the n query rows over those T rows, `numKvHeads` and
 * `queryOffset: T - n`: the softmax the cache computed, up to the float32-vs-float64 rounding of the
 * reference. One decode step costs H * T * Dh multiply-adds.
 *
 * Given `saved` (one `cache.save()` per layer, from `save()`: TinyGPT.restoreSession), the caches are
 * loaded from those bytes (`mha.loadKVCache`) instead of created empty, and the K rows kept in JS are read
 * back from them (`cache.read()`: float32 values, or a float16 cache's binary16 bits widened), the values
 * the generation that saved them had kept.
 *
 * @param {{createKVCache: Function, loadKVCache?: Function, attentionWeights: Function, info?: {version: string}}} mha an instance from createMHA()
 * @param {{dtype?: 'float32' | 'float16' | 'bfloat16' | 'int8' | 'int4'}} [options] the caches' dtype
 *   (createKVCache's; the package's list is its export kvCacheDTypes)
 * @returns {(geometry: {numLayers: number, numHeads: number, numKvHeads: number, headDim: number, capacity: number}, saved?: Uint8Array[]) => import('./runner.mjs').AttentionBackend}
 */
export function kvCacheBackend(mha, { dtype = 'float32' } = {}) {
  if (typeof mha?.createKVCache !== 'function') {
    throw new TypeError(
      `kvCacheBackend: mha: expected an mha-wasm instance with createKVCache (docs/spec.md Part 3), got ${mha?.info?.version ?? typeof mha}`,
    );
  }
  if (typeof dtype !== 'string')
    throw new TypeError(`kvCacheBackend: dtype: expected a cache dtype name such as 'float16', got ${typeof dtype}`);
  return ({ numLayers, numHeads: H, numKvHeads: Hkv, headDim: Dh, capacity }, saved) => {
    const kvWidth = Hkv * Dh;
    const caches =
      saved === undefined
        ? createCaches(mha, numLayers, { batch: 1, numKvHeads: Hkv, headDim: Dh, capacity, dtype })
        : loadCaches(mha, saved, { numLayers, kvWidth, capacity, dtype });
    // Per layer: the K rows the cache holds, (capacity, Hkv*Dh)
    const keys = caches.map((cache) => {
      const stored = new Float32Array(capacity * kvWidth);
      if (cache.length > 0) keepStoredKeys(cache, 0, cache.length, stored, kvWidth);
      return stored;
    });

    /** q (n, H*Dh), k and v (n, Hkv*Dh) -> (n, H*Dh); keeps k's rows, as stored, for `weights`. */
    function attend(layer, q, k, v) {
      const cache = caches[layer];
      const held = cache.length;
      const out = cache.attend(q, k, v, { numHeads: H }); // throws past capacity, changing nothing
      keepStoredKeys(cache, held, cache.length, keys[layer], kvWidth);
      return out;
    }

    return {
      prefill: attend,
      step: attend,
      weights(layer, q, n) {
        const T = caches[layer].length;
        const weights = mha.attentionWeights(q, keys[layer].subarray(0, T * kvWidth), {
          batch: 1,
          seqLen: n,
          kvSeqLen: T,
          dModel: H * Dh,
          numHeads: H,
          numKvHeads: Hkv,
          queryOffset: T - n,
          causal: true,
        });
        return { weights, kvLength: T };
      },
      length: () => caches[numLayers - 1].length,
      save: () => caches.map((cache) => cache.save()),
      truncate(n) {
        for (const cache of caches) cache.truncate(n);
      },
      free() {
        for (const cache of caches) cache.free();
      },
    };
  };
}

/** numLayers caches of `options`, or none (a bad option: createKVCache's error, named as this backend's). */
function createCaches(mha, numLayers, options) {
  const caches = [];
  try {
    for (let l = 0; l < numLayers; l++) caches.push(mha.createKVCache(options));
  } catch (error) {
    for (const cache of caches) cache.free();
    throw new error.constructor(`kvCacheBackend: ${error.message}`);
  }
  return caches;
}

/**
 * K rows [start, end) as `cache` stores them, into `stored` (Float32Array of rows of kvWidth): read back,
 * so every dtype's rounding is the cache's own (a float16 cache gives binary16 bits, widened here).
 */
function keepStoredKeys(cache, start, end, stored, kvWidth) {
  const { k } = cache.read({ start, end });
  if (k instanceof Uint16Array) for (let i = 0; i < k.length; i++) stored[start * kvWidth + i] = float16Value(k[i]);
  else stored.set(k, start * kvWidth);
}

/**
 * The saved caches of one sequence, loaded and checked against the model: one per layer, batch 1, the
 * backend's dtype, K/V of Hkv * Dh per token, the same length in every layer. Frees what it loaded when
 * one is refused.
 */
function loadCaches(mha, saved, { numLayers, kvWidth, capacity, dtype }) {
  const fn = 'kvCacheBackend';
  if (typeof mha.loadKVCache !== 'function')
    throw new TypeError(
      `${fn}: mha: expected an mha-wasm instance with loadKVCache (docs/spec.md 4.7), got ${mha?.info?.version ?? typeof mha}`,
    );
  if (!Array.isArray(saved) || !saved.every((bytes) => bytes instanceof Uint8Array)) {
    throw new TypeError(
      `${fn}: saved: expected an array of Uint8Array (one cache.save() per layer), got ${Array.isArray(saved) ? saved.map((b) => b?.constructor?.name ?? typeof b).join(', ') : typeof saved}`,
    );
  }
  if (saved.length !== numLayers)
    throw new RangeError(`${fn}: saved: expected ${numLayers} caches (one per layer), got ${saved.length}`);
  const caches = [];
  try {
    saved.forEach((bytes, i) => {
      const what = `${fn}: saved[${i}]`;
      let cache;
      try {
        cache = mha.loadKVCache(bytes, { capacity });
      } catch (error) {
        throw new error.constructor(`${what}: ${error.message}`);
      }
      caches.push(cache);
      const lengths = [...cache.lengths];
      if (lengths.length !== 1)
        throw new RangeError(`${what}: expected a cache of batch 1 (one sequence), got batch ${lengths.length}`);
      if (cache.dtype !== dtype)
        throw new RangeError(`${what}: expected dtype ${dtype} (this backend's), got ${cache.dtype}`);
      if (lengths[0] !== caches[0].length)
        throw new RangeError(`${what}: expected ${caches[0].length} tokens (layer 0's), got ${lengths[0]}`);
      if (lengths[0] > 0) {
        const { k, v } = cache.read({ start: 0, end: 1 }); // the cache has no numKvHeads getter: one token tells its widths
        if (k.length !== kvWidth || v.length !== kvWidth)
          throw new RangeError(
            `${what}: expected K and V of ${kvWidth} values per token (the model's), got ${k.length} and ${v.length}`,
          );
      }
    });
  } catch (error) {
    for (const cache of caches) cache.free();
    throw error;
  }
  return caches;
}
