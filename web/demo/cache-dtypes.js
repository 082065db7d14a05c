// What the loaded package can store a KV cache as, from its own lists (kvCacheDTypes and
// integerArithmeticDTypes, generated from the C++ table of dtypes), so that a dtype added there shows up here
// with no change to the page.
import { integerArithmeticDTypes, kvCacheDTypes } from '/dist/index.js';

/** The cache dtype names of this release, in the table's order ('float32' first). */
export function cacheDTypes() {
  return [...kvCacheDTypes];
}

/** Whether createKVCache takes `arithmetic: 'integer'` for `dtype` (only the integer dtypes have it). */
export function hasIntegerArithmetic(dtype) {
  return integerArithmeticDTypes.includes(dtype);
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
