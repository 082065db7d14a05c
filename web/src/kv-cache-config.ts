// createKVCache's options (docs/spec.md Part 3, 4.8): their checks, the bytes the core allocates for them,
// and the C++ cache made of a checked config. kv-cache.ts wraps the id in a WasmKVCache.
import type { CacheCallLayout } from './call-abi.js';
import {
  CACHE_DTYPE_NAME_LIST,
  CACHE_DTYPES,
  cacheDTypeCode,
  INTEGER_DTYPE_NAME_LIST,
  integerArithmeticDTypes,
} from './cache-dtype.js';
import { describe } from './describe.js';
import type { KVCacheArithmetic, KVCacheDType, KVCacheOptions } from './kv-cache-types.js';
import type { MhaWasmModule } from './mha.js';
import { doesNotFit } from './heap.js';
import type { StagingArena } from './staging.js';
import { checkDim, checkOptionsObject } from './validate.js';

export const KV_CACHE_KEYS = [
  'batch',
  'numKvHeads',
  'headDim',
  'capacity',
  'dtype',
  'vHeadDim',
  'ring',
  'arithmetic',
] as const;

/**
 * What creating and attending a cache need of its instance: the module, the staging arena and the cache
 * call layout (kv-cache.ts's CacheHost adds the registry of live caches).
 */
export interface CacheCallHost {
  readonly wasm: MhaWasmModule;
  readonly arena: StagingArena;
  readonly cacheLayout: CacheCallLayout;
}

export interface CacheConfig {
  batch: number;
  numKvHeads: number;
  headDim: number;
  capacity: number;
  dtype: KVCacheDType;
  /** Dv: the vHeadDim option, or headDim. */
  valueDim: number;
  /** A ring cache (docs/spec.md 5.5): each sequence keeps its last `capacity` tokens. */
  ring: boolean;
  /** Integer arithmetic (docs/spec.md 5.1), or 'float'. */
  arithmetic: KVCacheArithmetic;
}

/**
 * The arithmetic option of createKVCache (with the cache's dtype) or loadKVCache (dtype undefined: the core
 * checks the save's): undefined is 'float'; another string a RangeError, another type a TypeError; set for a
 * dtype that has no integer arithmetic, a TypeError.
 */
export function checkArithmetic(fn: string, value: unknown, dtype?: KVCacheDType): KVCacheArithmetic {
  if (value === undefined) return 'float';
  if (value !== 'float' && value !== 'integer') {
    const message = `${fn}: arithmetic: expected 'float' or 'integer', got ${describe(value)}`;
    throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
  }
  if (dtype !== undefined && !integerArithmeticDTypes.includes(dtype)) {
    const only = `applies to ${INTEGER_DTYPE_NAME_LIST} caches only`;
    throw new TypeError(`${fn}: arithmetic: ${only}, got ${describe(value)} for a '${dtype}' cache`);
  }
  return value;
}

function checkDType(fn: string, value: unknown): KVCacheDType {
  if (value === undefined) return 'float32';
  if ((CACHE_DTYPES as readonly unknown[]).includes(value)) return value as KVCacheDType;
  const message = `${fn}: dtype: expected ${CACHE_DTYPE_NAME_LIST}, got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/** Checks createKVCache's options (dims, dtype, and the bytes the storage needs against the heap's limit). */
export function checkCacheOptions(wasm: MhaWasmModule, options: KVCacheOptions): CacheConfig {
  const fn = 'createKVCache';
  const o = checkOptionsObject(`${fn}: options`, options, KV_CACHE_KEYS);
  const config: CacheConfig = {
    batch: checkDim(`${fn}: batch`, o.batch),
    numKvHeads: checkDim(`${fn}: numKvHeads`, o.numKvHeads),
    headDim: checkDim(`${fn}: headDim`, o.headDim),
    capacity: checkDim(`${fn}: capacity`, o.capacity),
    dtype: checkDType(fn, o.dtype),
    valueDim: 0,
    ring: false,
    arithmetic: 'float',
  };
  if (o.ring !== undefined && typeof o.ring !== 'boolean')
    throw new TypeError(`${fn}: ring: expected true or false, got ${describe(o.ring)}`);
  config.ring = o.ring === true;
  config.arithmetic = checkArithmetic(fn, o.arithmetic, config.dtype);
  config.valueDim = o.vHeadDim === undefined ? config.headDim : checkDim(`${fn}: vHeadDim`, o.vHeadDim);
  const bytes = cacheBytes(wasm, config);
  if (!(bytes < wasm.maxMemoryBytes())) throw tooLarge(wasm, config, bytes);
  return config;
}

export function cacheBytes(wasm: MhaWasmModule, c: CacheConfig): number {
  return wasm._mha_kv_cache_bytes(c.batch, c.numKvHeads, c.headDim, c.capacity, cacheDTypeCode(c.dtype), valueDimOf(c));
}

/** The ABI's value_dim: 0 when Dv = Dh (what a cache without vHeadDim writes). */
const valueDimOf = (c: CacheConfig): number => (c.valueDim === c.headDim ? 0 : c.valueDim);

function tooLarge(wasm: MhaWasmModule, c: CacheConfig, bytes: number, why = ''): RangeError {
  const dims =
    c.valueDim === c.headDim
      ? `batch*numKvHeads*capacity*headDim = ${c.batch}*${c.numKvHeads}*${c.capacity}*${c.headDim}`
      : `batch*numKvHeads*capacity*(headDim + vHeadDim) = ${c.batch}*${c.numKvHeads}*${c.capacity}*(${c.headDim} + ` +
        `${c.valueDim})`;
  return new RangeError(
    `createKVCache: capacity: a ${c.dtype} cache of ${dims} for its keys and values ${doesNotFit(wasm, bytes)}${why}`,
  );
}

/** Creates the C++ cache of a checked config and returns its id. */
export function createCache(host: CacheCallHost, config: CacheConfig): number {
  const { wasm, arena } = host;
  const idAt = arena.reserve('createKVCache', 16);
  wasm.HEAP32[idAt >>> 2] = 0;
  const c = config;
  const status = wasm._mha_kv_cache_create(
    c.batch,
    c.numKvHeads,
    c.headDim,
    c.capacity,
    cacheDTypeCode(c.dtype),
    valueDimOf(c),
    c.ring ? 1 : 0,
    c.arithmetic === 'integer' ? 1 : 0,
    idAt,
  );
  // The dims passed the checks above, so what the core can still refuse is the memory (the heap cannot grow
  // that far, or the size check): said with the bytes and the core's own message.
  if (status !== 0) throw tooLarge(wasm, c, cacheBytes(wasm, c), ` (the wasm core: ${wasm.statusMessage(status)})`);
  return wasm.HEAP32[idAt >>> 2]! >>> 0; // a uint32 id
}
