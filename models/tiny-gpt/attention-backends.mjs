// Attention backends for the tiny-gpt runner (runner.mjs): they hold the K/V of every layer of one
// sequence and run causal attention over them on mha-wasm. The interface (AttentionBackend) is documented
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
 * Today's backend: the K/V live in JS and every call is one stateless `mha.multiHeadAttention`
 * (mha-wasm 0.1, docs/spec.md Part 1).
 *
 * TEMPORARY: mha-wasm 0.1 has no `numKvHeads`, so this backend copies each KV head to the H/Hkv query heads
 * that share it (query head h reads KV head floor(h / (H / Hkv))) and passes full-width K/V. Once grouped-query
 * attention (spec Part 2.1) is merged, pass the Hkv-wide K/V with `numKvHeads` and delete the repeat; once
 * the KV cache (Part 3) is merged, use createKVCacheBackend instead.
 *
 * Causality without `queryOffset` (0.1 aligns causal masks upper-left): a prefill into an empty cache is
 * `causal: true` (S = T); a single step sees every stored key, so it needs no mask; a prefill after earlier
 * tokens passes an explicit (1, n, T) mask.
 *
 * dtype 'float16' rounds K/V to binary16 (ties to even) before storing them, which emulates in JS what a
 * float16 cache stores (spec Part 3); it exists so the f16 golden data can be checked before the cache is.
 *
 * @param {{multiHeadAttention: Function, attentionWeights: Function}} mha an instance from createMHA()
 * @param {{dtype?: 'float32' | 'float16'}} [options]
 * @returns {(geometry: {numLayers: number, numHeads: number, numKvHeads: number, headDim: number, capacity: number}) => import('./runner.mjs').AttentionBackend}
 */
export function repeatedKvBackend(mha, { dtype = 'float32' } = {}) {
  if (dtype !== 'float32' && dtype !== 'float16') throw new RangeError(`repeatedKvBackend: dtype: expected 'float32' or 'float16', got ${dtype}`);
  return ({ numLayers, numHeads: H, numKvHeads: Hkv, headDim: Dh, capacity }) => {
    const D = H * Dh;
    const group = H / Hkv;
    // Per layer: K and V repeated to H heads, (capacity, H*Dh)
    const keys = Array.from({ length: numLayers }, () => new Float32Array(capacity * D));
    const values = Array.from({ length: numLayers }, () => new Float32Array(capacity * D));
    const lengths = new Array(numLayers).fill(0); // tokens held per layer; equal between forward calls
    const round = dtype === 'float16' ? roundToFloat16 : (x) => x;

    /** k (n, Hkv*Dh) -> dst rows [at, at + n) of (capacity, H*Dh), head g copied to heads g*group .. */
    function storeRepeated(dst, src, n, at) {
      for (let i = 0; i < n; i++) {
        for (let h = 0; h < H; h++) {
          const from = i * Hkv * Dh + Math.floor(h / group) * Dh;
          const to = (at + i) * D + h * Dh;
          for (let e = 0; e < Dh; e++) dst[to + e] = round(src[from + e]);
        }
      }
    }

    /** The options of one call for the last n of T keys' queries: causal upper-left, none, or a mask. */
    function visibility(n, T) {
      const options = { batch: 1, seqLen: n, kvSeqLen: T, dModel: D, numHeads: H };
      const before = T - n;
      if (before === 0) {
        options.causal = true;
      } else if (n > 1) {
        const mask = new Uint8Array(n * T); // query i sits at position before + i
        for (let i = 0; i < n; i++) mask.fill(1, i * T, i * T + before + i + 1);
        options.mask = mask;
      }
      return options;
    }

    function attend(layer, q, k, v, n) {
      const held = lengths[layer];
      if (held + n > capacity) throw new RangeError(`repeatedKvBackend: ${held} + ${n} tokens exceed the capacity of ${capacity}`);
      storeRepeated(keys[layer], k, n, held);
      storeRepeated(values[layer], v, n, held);
      const T = (lengths[layer] = held + n);
      return mha.multiHeadAttention(q, keys[layer].subarray(0, T * D), values[layer].subarray(0, T * D), visibility(n, T));
    }

    return {
      prefill: attend,
      step: (layer, q, k, v) => attend(layer, q, k, v, 1),
      weights(layer, q, n) {
        const T = lengths[layer];
        return { weights: mha.attentionWeights(q, keys[layer].subarray(0, T * D), visibility(n, T)), kvLength: T };
      },
      length: () => lengths[numLayers - 1],
      truncate(n) {
        const held = lengths[numLayers - 1];
        if (!(Number.isInteger(n) && n >= 0 && n <= held)) throw new RangeError(`repeatedKvBackend.truncate: n: expected an integer in [0, ${held}], got ${n}`);
        lengths.fill(n);
      },
      free() {},
    };
  };
}

/**
 * TODO(KV cache): the intended backend, one `mha.createKVCache` per layer (docs/spec.md Part 3), with the
 * Hkv-wide K/V passed as they are (grouped-query attention, Part 2.1). Written against the spec's API; it
 * cannot run until createKVCache is in the package, and throws saying so. When it lands: run
 * tests/js/tiny-gpt.test.mjs with this backend (f32 against golden "f32", f16 against golden "f16").
 * @param {{createKVCache?: Function, info?: {version: string}}} mha
 * @param {{dtype?: 'float32' | 'float16'}} [options]
 * @returns {(geometry: {numLayers: number, numHeads: number, numKvHeads: number, headDim: number, capacity: number}) => import('./runner.mjs').AttentionBackend}
 */
export function kvCacheBackend(mha, { dtype = 'float32' } = {}) {
  if (typeof mha.createKVCache !== 'function') {
    throw new Error(`kvCacheBackend: this mha-wasm (${mha.info?.version ?? 'unknown version'}) has no createKVCache (docs/spec.md Part 3); use repeatedKvBackend until it is merged`);
  }
  return ({ numLayers, numHeads, numKvHeads, headDim, capacity }) => {
    const caches = Array.from({ length: numLayers }, () => mha.createKVCache({ batch: 1, numKvHeads, headDim, capacity, dtype }));
    const attend = (layer, q, k, v) => caches[layer].attend(q, k, v, { numHeads }); // causal by default
    // TODO(demo): `weights` for the heatmaps. The spec has no weights-over-a-cache call; attentionWeights
    // with numKvHeads + queryOffset over K read back from the cache (or kept in JS) would do.
    return {
      prefill: attend,
      step: attend,
      length: () => caches[numLayers - 1].length,
      truncate(n) { for (const cache of caches) cache.truncate(n); },
      free() { for (const cache of caches) cache.free(); },
    };
  };
}
