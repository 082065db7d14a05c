// The KV cache dtypes and their numbers in the wasm exports (mha::CacheDType): the name <-> number mapping
// used by kv-cache-config.ts and cache-io.ts, from the table of dtypes in src/mha/cache/cache_codecs.hpp through
// cache-dtypes.generated.ts (scripts/gen-cache-dtypes.mjs).
import {
  CACHE_DTYPE_LIST,
  CACHE_DTYPE_NAMES,
  INTEGER_DTYPE_LIST,
  INTEGER_DTYPE_NAMES,
} from './cache-dtypes.generated.js';
import type { KVCacheDType } from './kv-cache-types.js';

/** Index = the CacheDType number of `_mha_kv_cache_bytes`, `_mha_kv_cache_create` and the config export. */
export const CACHE_DTYPES: readonly KVCacheDType[] = CACHE_DTYPE_NAMES;

/** The dtype names as messages list them: 'float32', 'float16', 'bfloat16' or 'int8'. */
export const CACHE_DTYPE_NAME_LIST: string = CACHE_DTYPE_LIST;

/**
 * The KV cache dtypes this release stores (`createKVCache({ dtype })`), float32 first: for pickers and
 * feature checks, so that an app need not hard-code the list or parse an error message.
 */
export const kvCacheDTypes: readonly KVCacheDType[] = Object.freeze([...CACHE_DTYPE_NAMES]);

/** The dtypes that take `arithmetic: 'integer'` (docs/spec.md 5.1); a subset of {@link kvCacheDTypes}. */
export const integerArithmeticDTypes: readonly KVCacheDType[] = Object.freeze([...INTEGER_DTYPE_NAMES]);

/** Those dtype names as messages list them: 'int8' and 'int4'. */
export const INTEGER_DTYPE_NAME_LIST: string = INTEGER_DTYPE_LIST;

// The public KVCacheDType (kv-cache-types.ts) names exactly the table's dtypes: tsc fails on a difference.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const namesMatch: Same<KVCacheDType, (typeof CACHE_DTYPE_NAMES)[number]> = true;
void namesMatch;

/** The CacheDType number of a dtype name. */
export const cacheDTypeCode = (dtype: KVCacheDType): number => CACHE_DTYPES.indexOf(dtype);

/** The dtype name of a CacheDType number the core gave (a number this release does not know: an Error). */
export function cacheDTypeName(code: number): KVCacheDType {
  const name = CACHE_DTYPES[code];
  if (name === undefined)
    throw new Error(`loadKVCache: the wasm core gave cache dtype number ${code}, which this release does not know`);
  return name;
}
