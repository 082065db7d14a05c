// KVCache.save and mha.loadKVCache (docs/spec.md 4.7, docs/cache-format.md). Being built (issue #31).
// Plain functions of the module and the arena: kv-cache.ts and instance.ts wrap their results in a
// WasmKVCache (no import of kv-cache.ts here, so no cycle).
import type { LoadKVCacheOptions } from './kv-cache-types.js';
import type { MhaWasmModule } from './mha.js';
import type { StagingArena } from './staging.js';

/** The bytes of cache `id`. */
export function saveCache(_wasm: MhaWasmModule, _arena: StagingArena, _id: number): Uint8Array {
  throw new Error('KVCache.save: not built yet');
}

/** A loaded cache: its id, dims and lengths. */
export interface LoadedCache {
  id: number;
  config: { batch: number; numKvHeads: number; headDim: number; capacity: number; dtype: 'float32' | 'float16'; valueDim: number };
  lengths: Int32Array;
}

export function loadCache(_wasm: MhaWasmModule, _arena: StagingArena, _bytes: unknown, _options: LoadKVCacheOptions | undefined): LoadedCache {
  throw new Error('loadKVCache: not built yet');
}
