// KVCache.save and mha.loadKVCache (docs/spec.md 4.7, docs/cache-format.md). Plain functions of the module
// and the arena: kv-cache.ts and instance.ts wrap their results in a WasmKVCache (no import of kv-cache.ts
// here, so no cycle). The format, its checks and every message about the bytes are the core's
// (src/mha/cache/kv_cache_io.hpp): nothing here reads a field of a save.
import { cacheDTypeName } from './cache-dtype.js';
import { describe } from './describe.js';
import { checkArithmetic } from './kv-cache-config.js';
import type { CacheConfig } from './kv-cache-config.js';
import type { LoadKVCacheOptions } from './kv-cache-types.js';
import { roomLeft } from './heap.js';
import type { MhaWasmModule } from './mha.js';
import { copyIn } from './staging.js';
import type { StagingArena } from './staging.js';
import { checkStatus, HEAP_STATUSES } from './status.js';
import { checkDim, checkNotDetached, checkOptionsObject } from './validate.js';

const LOAD_KEYS = ['capacity', 'arithmetic'] as const;

/**
 * A save or load that needs more staging than the arena held, and more than this, gives the block back
 * afterwards: a one-off save of a long cache (8 MiB for 4096 tokens of 8 float16 heads of 64) then does not
 * keep its size on the heap for the life of the instance. A block that attention calls grew is kept.
 */
const KEEP_STAGING_BYTES = 4 << 20;

/** Releases the arena's block when `bytes` grew it past KEEP_STAGING_BYTES (`before`: its room before). */
function releaseIfGrown(arena: StagingArena, before: number, bytes: number): void {
  if (bytes > before && bytes > KEEP_STAGING_BYTES) arena.release();
}

/** The bytes of cache `id`: the core writes them into the staging, and they are copied out. */
export function saveCache(wasm: MhaWasmModule, arena: StagingArena, id: number): Uint8Array {
  const fn = 'KVCache.save';
  const size = wasm._mha_kv_cache_saved_bytes(id);
  if (size < 0) checkStatus(wasm, fn, wasm._mha_kv_cache_save(id, 0, 0)); // a live cache's id always has a size
  const before = arena.room;
  const at = arena.reserve(fn, size);
  try {
    checkStatus(wasm, fn, wasm._mha_kv_cache_save(id, at, size));
    // A copy (slice) of a fresh view: the reserve may have grown memory; a new buffer, never shared.
    return wasm.HEAPU8.slice(at, at + size);
  } finally {
    releaseIfGrown(arena, before, size);
  }
}

/** A loaded cache: its id, dims and lengths. */
export interface LoadedCache {
  id: number;
  config: CacheConfig;
  lengths: Int32Array;
  /** Tokens each sequence holds (a ring's may be fewer than its length). */
  stored: Int32Array;
}

/**
 * Checks the arguments of loadKVCache, copies the bytes onto the heap (the staging: the only allocation
 * before the core has checked them) and has the core check and load them. Every refusal is a RangeError
 * (TypeError for a wrong type) naming the parameter, with the core's reason; a refused load leaves nothing
 * allocated but the staging, which the arena owns.
 */
export function loadCache(
  wasm: MhaWasmModule,
  arena: StagingArena,
  bytes: unknown,
  options: LoadKVCacheOptions | undefined,
): LoadedCache {
  const fn = 'loadKVCache';
  // ArrayBuffer.isView: a Proxy of a Uint8Array passes instanceof but its reads would run user code.
  if (!(bytes instanceof Uint8Array) || !ArrayBuffer.isView(bytes)) {
    throw new TypeError(
      `${fn}: bytes: expected a Uint8Array (what KVCache.save returned, a subarray of it or a Node Buffer), ` +
        `got ${describe(bytes)}`,
    );
  }
  checkNotDetached(`${fn}: bytes`, bytes);
  const o = options === undefined ? {} : checkOptionsObject(`${fn}: options`, options, LOAD_KEYS);
  // 0: the saved capacity.
  const capacity = o.capacity === undefined ? 0 : checkDim(`${fn}: capacity`, o.capacity);
  const arithmetic = checkArithmetic(fn, o.arithmetic);
  // Read before the malloc, which may detach a view of this heap (see copyIn).
  const [length, byteOffset] = [bytes.length, bytes.byteOffset];
  // [id: 16 bytes][config: 8 int32, 32 bytes][the bytes, then as many again; after the load, the lengths
  // and stored counts (2B int32: a save holds at least 4 bytes a sequence, so 8B < 2 * its size)]
  const before = arena.room;
  const staged = 48 + 2 * length;
  const base = arena.reserve(fn, staged);
  try {
    const [idAt, configAt, bytesAt] = [base, base + 16, base + 48];
    copyIn(wasm.HEAPU8, bytes, byteOffset, 0, length, bytesAt);
    const status = wasm._mha_kv_cache_load(bytesAt, length, capacity, arithmetic === 'integer' ? 1 : 0, idAt);
    if (status !== 0) {
      const why = wasm.kvCacheLoadError() || `bytes: ${wasm.statusMessage(status)}`;
      // An arithmetic the save's dtype does not take: a TypeError, as createKVCache's.
      if (why.startsWith('arithmetic:')) throw new TypeError(`${fn}: ${why}`);
      throw new RangeError(`${fn}: ${why}${HEAP_STATUSES.includes(status) ? `; ${roomLeft(wasm)}` : ''}`);
    }
    const id = wasm.HEAP32[idAt >>> 2]! >>> 0; // a uint32 id
    checkStatus(wasm, fn, wasm._mha_kv_cache_config(id, configAt));
    const [batch, numKvHeads, headDim, cacheCapacity, dtype, valueDim, ring, integer] = wasm.HEAP32.subarray(
      configAt >>> 2,
      (configAt >>> 2) + 8,
    );
    checkStatus(wasm, fn, wasm._mha_kv_cache_lengths(id, bytesAt));
    const lengths = wasm.HEAP32.slice(bytesAt >>> 2, (bytesAt >>> 2) + batch!);
    const stored = wasm.HEAP32.slice((bytesAt >>> 2) + batch!, (bytesAt >>> 2) + 2 * batch!);
    return {
      id,
      config: {
        batch: batch!,
        numKvHeads: numKvHeads!,
        headDim: headDim!,
        capacity: cacheCapacity!,
        dtype: cacheDTypeName(dtype!),
        valueDim: valueDim!,
        ring: ring === 1,
        arithmetic: integer === 1 ? 'integer' : 'float',
      },
      lengths,
      stored,
    };
  } finally {
    releaseIfGrown(arena, before, staged);
  }
}
