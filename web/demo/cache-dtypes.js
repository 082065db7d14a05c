// What a KV cache of each dtype costs, asked of the package itself (the dtypes are its kvCacheDTypes).

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
