// The attention backend of the tiny-gpt runner (runner.mjs): it holds the K/V of every layer of one
// sequence in mha-wasm KV caches and runs causal attention over them. The interface (AttentionBackend) is documented
// in runner.mjs. Plain ESM without imports, for Node, pages and Workers alike; the caller passes the
// mha-wasm instance in.
//
// Shapes, with the letters of docs/spec.md (B = 1): S new tokens of one call (n in the code), T tokens
// held, H query heads, Hkv KV heads, Dh head size, D = H * Dh.

const float16Scratch = new Float32Array(1);
const float16ScratchBits = new Uint32Array(float16Scratch.buffer);

/**
 * The float32 x rounded to the nearest binary16 value (ties to even; overflow to +-Infinity), returned as
 * a number: what a float16 KV cache stores and reads back.
 * @param {number} x
 */
export function roundToFloat16(x) {
  if (!Number.isFinite(x) || x === 0) return x;
  const magnitude = Math.abs(x);
  if (magnitude >= 65520) return x > 0 ? Infinity : -Infinity; // 65520 = halfway to 2^16, ties to even = Inf
  float16Scratch[0] = magnitude;
  const exponent = Math.max(((float16ScratchBits[0] >>> 23) & 0xff) - 127, -14); // below 2^-14: subnormal
  const quantum = 2 ** (exponent - 10); // spacing of binary16 values in this binade
  const scaled = magnitude / quantum; // exact: a power-of-two division of a float32
  let rounded = Math.floor(scaled);
  const fraction = scaled - rounded;
  if (fraction > 0.5 || (fraction === 0.5 && rounded % 2 === 1)) rounded += 1;
  return Math.sign(x) * rounded * quantum;
}

/**
 * The backend: one `mha.createKVCache` per layer (docs/spec.md Part 3), the Hkv-wide K/V passed as they are
 * (grouped-query attention, Part 2.1: query head h reads KV head floor(h / (H / Hkv)) in place). A prefill
 * and a decode step are the same call, `cache.attend`, causal with query positions starting at the length.
 *
 * `weights` (for the demo's heatmaps and the head scores): the cache has no weights-over-the-cache call,
 * so this backend also keeps each layer's K rows in JS, as the cache stores them (rounded to binary16 when
 * dtype is 'float16'; Hkv*Dh floats per token and layer, a copy that costs far less than the attend), and
 * calls `mha.attentionWeights` with the n query rows over those T rows, `numKvHeads` and
 * `queryOffset: T - n`: the softmax the cache computed, up to the float32-vs-float64 rounding of the
 * reference. One decode step costs H * T * Dh multiply-adds.
 *
 * @param {{createKVCache: Function, attentionWeights: Function, info?: {version: string}}} mha an instance from createMHA()
 * @param {{dtype?: 'float32' | 'float16'}} [options]
 * @returns {(geometry: {numLayers: number, numHeads: number, numKvHeads: number, headDim: number, capacity: number}) => import('./runner.mjs').AttentionBackend}
 */
export function kvCacheBackend(mha, { dtype = 'float32' } = {}) {
  if (typeof mha?.createKVCache !== 'function') {
    throw new TypeError(`kvCacheBackend: mha: expected an mha-wasm instance with createKVCache (docs/spec.md Part 3), got ${mha?.info?.version ?? typeof mha}`);
  }
  if (dtype !== 'float32' && dtype !== 'float16') throw new RangeError(`kvCacheBackend: dtype: expected 'float32' or 'float16', got ${dtype}`);
  const round = dtype === 'float16' ? roundToFloat16 : (x) => x;
  return ({ numLayers, numHeads: H, numKvHeads: Hkv, headDim: Dh, capacity }) => {
    const caches = Array.from({ length: numLayers }, () => mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity, dtype }));
    const kvWidth = Hkv * Dh;
    // Per layer: the K rows the cache holds, (capacity, Hkv*Dh)
    const keys = Array.from({ length: numLayers }, () => new Float32Array(capacity * kvWidth));

    /** q (n, H*Dh), k and v (n, Hkv*Dh) -> (n, H*Dh); keeps k's rows for `weights`. */
    function attend(layer, q, k, v) {
      const held = caches[layer].length;
      const out = caches[layer].attend(q, k, v, { numHeads: H }); // throws past capacity, changing nothing
      const stored = keys[layer];
      for (let i = 0; i < k.length; i++) stored[held * kvWidth + i] = round(k[i]);
      return out;
    }

    return {
      prefill: attend,
      step: attend,
      weights(layer, q, n) {
        const T = caches[layer].length;
        const weights = mha.attentionWeights(q, keys[layer].subarray(0, T * kvWidth), {
          batch: 1, seqLen: n, kvSeqLen: T, dModel: H * Dh, numHeads: H, numKvHeads: Hkv, queryOffset: T - n, causal: true,
        });
        return { weights, kvLength: T };
      },
      length: () => caches[numLayers - 1].length,
      truncate(n) { for (const cache of caches) cache.truncate(n); },
      free() { for (const cache of caches) cache.free(); },
    };
  };
}
