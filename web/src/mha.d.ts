// Types of the Emscripten glue (dist/mha.js, generated from src/bindings.cpp). Private to the package.
export interface MhaWasmModule {
  _malloc(bytes: number): number;
  _free(address: number): void;
  // Direct C exports of src/bindings.cpp (addresses and dims in, mha::Status out). The attention calls take
  // the heap address of one AttentionCallAbi (written by call-abi.ts).
  _mha_attention(call: number): number;
  // _mha_attention in two halves (a pool computes while the caller copies): begin returns the call's
  // status (nonzero: nothing to join), join returns once the oldest pending call is done. Two calls may
  // be pending (a third begin joins the oldest first).
  _mha_attention_begin(call: number): number;
  _mha_attention_join(): void;
  _mha_attention_weights(call: number): number;
  // float16 tensors: n binary16 values widened to float32 (in place: halves may sit in the upper half of
  // the floats' slot), and float32 rounded once to binary16 (in place: halves may be floats).
  _mha_widen_halves(halves: number, floats: number, n: number): void;
  _mha_narrow_floats(floats: number, halves: number, n: number): void;
  _mha_split_heads(x: number, xh: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
  _mha_merge_heads(xh: number, x: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
  // The KV cache (src/bindings.cpp): caches are uint32 ids of the instance's registry. dtype 0 = float32,
  // 1 = float16. _mha_kv_cache_bytes: the bytes of K and V storage of those dims (-1 for bad dims);
  // _mha_kv_cache_create writes the new id at `idOut`; _mha_kv_cache_attend takes one CacheAttendCallAbi.
  // valueDim: Dv (vHeadDim), 0 = headDim.
  _mha_kv_cache_bytes(
    batch: number,
    numKvHeads: number,
    headDim: number,
    capacity: number,
    dtype: number,
    valueDim: number,
  ): number;
  _mha_kv_cache_create(
    batch: number,
    numKvHeads: number,
    headDim: number,
    capacity: number,
    dtype: number,
    valueDim: number,
    ring: number,
    integer: number,
    idOut: number,
  ): number;
  _mha_kv_cache_set_next_id(id: number): void;
  _mha_kv_cache_free(id: number): number;
  _mha_kv_cache_free_all(): void;
  _mha_kv_cache_lengths(id: number, lengthsOut: number): number;
  _mha_kv_cache_truncate(id: number, length: number): number;
  _mha_kv_cache_truncate_each(id: number, lengths: number): number;
  _mha_kv_cache_reorder(id: number, indices: number): number;
  // stored: 1 = the cache's own elements (float16 bits), 0 = float32.
  _mha_kv_cache_read(id: number, kOut: number, vOut: number, start: number, end: number, stored: number): number;
  _mha_kv_cache_attend(call: number): number;
  // Saving and loading (docs/cache-format.md): the save's byte count (-1: no such cache), the save written at
  // `dst` (exactly that many bytes), a load of `size` bytes at `src` (capacity 0 = the saved one; the id at
  // `idOut`, kvCacheLoadError() says why on failure; integer: 1 for integer arithmetic), and a cache's dims
  // as 8 int32 at `configOut`: batch, numKvHeads, headDim, capacity, dtype, Dv, ring, integer.
  _mha_kv_cache_saved_bytes(id: number): number;
  _mha_kv_cache_save(id: number, dst: number, size: number): number;
  _mha_kv_cache_load(src: number, size: number, capacity: number, integer: number, idOut: number): number;
  _mha_kv_cache_config(id: number, configOut: number): number;
  // Starts the thread pool (threaded build; returns the threads it got, 1 elsewhere or for threads <= 1).
  _mha_set_threads(threads: number): number;
  HEAPU8: Uint8Array;
  HEAP32: Int32Array;
  HEAPF32: Float32Array;
  // Embind, called once per instance or on the error path.
  // {field name: byte offset} of AttentionCallAbi, and its size in bytes.
  attentionCallLayout(): Record<string, number>;
  // {field name: byte offset} of CacheAttendCallAbi, and its size in bytes.
  kvCacheAttendCallLayout(): Record<string, number>;
  // The message of an mha::Status code, '' for a number that is none.
  statusMessage(status: number): string;
  // Why the last _mha_kv_cache_load failed, in the API's terms ('' after a success).
  kvCacheLoadError(): string;
  releaseScratch(): void;
  heapBytesInUse(): number;
  maxMemoryBytes(): number;
  version(): string;
  simd(): boolean;
  // Emscripten's worker pool (threaded build only).
  PThread?: {
    terminateAllThreads(): void;
    unusedWorkers: Array<{ unref?(): void }>;
    runningWorkers: Array<{ unref?(): void }>;
  };
}

/** A pooled pthread worker: a Web Worker (an EventTarget) or a Node Worker (an EventEmitter). */
export interface PooledWorker {
  onerror: ((event: unknown) => void) | null;
  addEventListener?(type: 'error', listener: (event: unknown) => void): void;
}

export interface MhaModuleOptions {
  wasmBinary?: ArrayBuffer | Uint8Array;
  // Threaded build: workers preloaded before the module is ready (Emscripten's PTHREAD_POOL_SIZE).
  mhaWorkers?: number;
  locateFile?(file: string, scriptDirectory: string): string;
  mainScriptUrlOrBlob?: string;
  // Emscripten assigns its pthread bookkeeping onto the options object (it becomes the Module). Each
  // pooled worker (a Web Worker, or a Node Worker whose 'error' events the glue forwards to onerror)
  // gets the glue's error handler when the module is instantiated.
  PThread?: {
    terminateAllThreads(): void;
    unusedWorkers: PooledWorker[];
    runningWorkers: PooledWorker[];
  };
  instantiateWasm?(
    imports: WebAssembly.Imports,
    done: (instance: WebAssembly.Instance, module: WebAssembly.Module) => void,
  ): object;
}

export type MhaModuleFactory = (options?: MhaModuleOptions) => Promise<MhaWasmModule>;
declare const createMhaModule: MhaModuleFactory;
export default createMhaModule;
