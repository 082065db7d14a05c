// The KV cache dtypes and their numbers in the wasm exports (mha::CacheDType, src/mha/cache/kv_cache.hpp):
// the one source of the name <-> number mapping, used by kv-cache.ts and cache-io.ts.
import type { KVCacheDType } from './kv-cache-types.js';

/** Index = the CacheDType number of `_mha_kv_cache_bytes`, `_mha_kv_cache_create` and the config export. */
export const CACHE_DTYPES: readonly KVCacheDType[] = ['float32', 'float16', 'bfloat16', 'int8'];

/** The CacheDType number of a dtype name. */
export const cacheDTypeCode = (dtype: KVCacheDType): number => CACHE_DTYPES.indexOf(dtype);

/** The dtype name of a CacheDType number the core gave (a number this release does not know: an Error). */
export function cacheDTypeName(code: number): KVCacheDType {
  const name = CACHE_DTYPES[code];
  if (name === undefined)
    throw new Error(`loadKVCache: the wasm core gave cache dtype number ${code}, which this release does not know`);
  return name;
}
