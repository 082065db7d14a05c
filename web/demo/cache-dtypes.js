// What the loaded package can store a KV cache as, asked of the package itself, so that a dtype added to the
// C++ table (src/mha/cache/cache_codecs.hpp) shows up here with no change to the page.
//
// The package exports no list of names, but createKVCache's dtype message is generated from that table
// (web/src/cache-dtypes.generated.ts, CACHE_DTYPE_LIST): "expected 'float32', 'float16', … or 'int8'". The
// names are read from it once per instance.

const PROBE = { batch: 1, numKvHeads: 1, headDim: 32, capacity: 32 };

/** The cache dtype names of this mha-wasm instance, in the table's order ('float32' first). */
export function cacheDTypes(mha) {
  try {
    mha.createKVCache({ ...PROBE, dtype: '\u0000not-a-dtype' }).free();
  } catch (error) {
    const list = /expected ((?:'[^']+'(?:, | or )?)+)/.exec(error.message)?.[1];
    const names = list ? [...list.matchAll(/'([^']+)'/g)].map((m) => m[1]) : [];
    if (names.length) return names;
  }
  // A message of another shape: offer what every release has rather than nothing.
  return ['float32'];
}

/**
 * Whether createKVCache takes `arithmetic: 'integer'` for `dtype` on this instance: false when the option is
 * unknown (a release before it) or refused for this dtype (only the integer dtypes have it).
 */
export function hasIntegerArithmetic(mha, dtype) {
  try {
    mha.createKVCache({ ...PROBE, dtype, arithmetic: 'integer' }).free();
    return true;
  } catch {
    return false;
  }
}

/** Bytes a cache of `dtype` holds per token for one layer of Hkv heads of Dh (scales included). */
export function bytesPerToken(mha, dtype, numKvHeads, headDim) {
  // 64 tokens: a whole number of every per-block scale the codecs keep (one per 32 tokens today).
  const capacity = 64;
  const cache = mha.createKVCache({ batch: 1, numKvHeads, headDim, capacity, dtype });
  try {
    return cache.bytes / capacity;
  } finally {
    cache.free();
  }
}
