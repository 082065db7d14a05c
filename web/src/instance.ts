// The MHA instance: one started wasm module, its staging arena, its heap tensors and KV caches. The
// methods are in modules of their own: multiHeadAttention (multi-head-attention.ts), attentionWeights
// (attention-weights.ts), the KV cache (kv-cache-config.ts, kv-cache.ts); each checks its arguments,
// stages them (staging.ts), writes the call struct (call-abi.ts), makes one direct wasm call and copies
// the result out. splitHeads and mergeHeads are here.
import type { TensorCheck } from './attention-options.js';
import { attentionWeights } from './attention-weights.js';
import { readCacheCallLayout } from './call-abi.js';
import type { CacheCallLayout, CallLayout } from './call-abi.js';
import { loadCache } from './cache-io.js';
import { doesNotFit, mallocBytes } from './heap.js';
import { checkArrayOnly, checkOperand, MallocedTensor } from './heap-tensor.js';
import { checkCacheOptions, createCache } from './kv-cache-config.js';
import { WasmKVCache } from './kv-cache.js';
import type { CacheHost } from './kv-cache.js';
import type { AttentionState, KVCache, KVCacheOptions, LoadKVCacheOptions } from './kv-cache-types.js';
import { mergeAttention } from './merge-attention.js';
import type { MergeAttentionOptions } from './merge-attention.js';
import type { MhaWasmModule } from './mha.js';
import { multiHeadAttention } from './multi-head-attention.js';
import type { AttentionHost } from './multi-head-attention.js';
import { ropeTables } from './rope.js';
import type { RopeTables, RopeTablesOptions } from './rope.js';
import {
  align16,
  AttentionStaging,
  copyIn,
  copyOut,
  layout,
  MALLOC_SLACK_FOR_16,
  StagingArena,
  totalBytes,
} from './staging.js';
import type { Operand } from './staging.js';
import { checkStatus } from './status.js';
import type { Float16Tensor, HeapTensor, TensorDType, TensorIn, TensorOut } from './tensor-types.js';
import type { AttentionOptions, AttentionWeightsOptions, BuildName, HeadShape, MHA, MHAInfo } from './types.js';
import { checkDim, checkDims, checkOptionsObject, HEAD_KEYS, qFormula } from './validate.js';

/** The MHA of the public API, backed by one instance of a wasm build. */
export class WasmMHA implements MHA, CacheHost, AttentionHost {
  // Replaced (not mutated) when dispose() ends the pool, so a caller's copy stays a true snapshot.
  private currentInfo: MHAInfo;
  readonly arena: StagingArena;
  /** Live KV caches of this instance, freed by dispose(). */
  readonly caches = new Set<WasmKVCache>();
  /** The layout of the KV cache's call struct, or why the module's does not match. */
  private readonly cacheCallLayout: CacheCallLayout | string;
  /** Whether the cache registry's ids got this instance's random base yet. */
  private cacheIdsSeeded = false;
  /** The staging plan of multiHeadAttention, refilled by each call. */
  readonly staging = new AttentionStaging();
  /** Live tensors of this instance, freed by dispose(). */
  private readonly tensors = new Set<MallocedTensor>();
  /** q, k, v, bias, out and lse: a Float32Array, or a heap tensor of this instance (its address). */
  readonly checkOperand: TensorCheck<Operand>;

  constructor(
    readonly wasm: MhaWasmModule,
    readonly callLayout: CallLayout,
    build: BuildName,
    threads: number,
  ) {
    this.cacheCallLayout = readCacheCallLayout(wasm);
    const cacheCallBytes = typeof this.cacheCallLayout === 'string' ? 0 : this.cacheCallLayout.bytes;
    // One call-struct slot serves both structs (a call writes one of them).
    this.arena = new StagingArena(wasm, Math.max(callLayout.bytes, cacheCallBytes));
    this.currentInfo = Object.freeze({
      version: wasm.version(),
      simd: wasm.simd(),
      threads,
      build,
      maxMemoryBytes: wasm.maxMemoryBytes(),
    });
    this.checkOperand = (name, value, expected, formula) => checkOperand(name, value, expected, formula, wasm);
  }

  get info(): MHAInfo {
    return this.currentInfo;
  }

  ropeTables(options: RopeTablesOptions): RopeTables {
    return ropeTables(options);
  }

  multiHeadAttention<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: AttentionOptions & { dtype?: D },
  ): TensorOut<D>;
  multiHeadAttention(
    q: Float32Array | HeapTensor | Float16Tensor,
    k: Float32Array | HeapTensor | Float16Tensor,
    v: Float32Array | HeapTensor | Float16Tensor,
    options: AttentionOptions,
  ): Float32Array | Float16Tensor {
    return multiHeadAttention(this, q, k, v, options);
  }

  allocate(length: number): HeapTensor {
    const fn = 'allocate';
    checkDim(`${fn}: length`, length);
    const bytes = length * 4;
    // The tensor starts on a 16-byte boundary, a whole v128.
    const total = bytes + MALLOC_SLACK_FOR_16;
    const block = mallocBytes(this.wasm, total);
    if (block === 0)
      throw new RangeError(`${fn}: length: a tensor of ${length} floats ${doesNotFit(this.wasm, bytes)}`);
    return new MallocedTensor(this.wasm, this.tensors, block, align16(block), length);
  }

  get cacheLayout(): CacheCallLayout {
    if (typeof this.cacheCallLayout === 'string') {
      throw new Error(`createKVCache: this wasm module is of another release: ${this.cacheCallLayout}`);
    }
    return this.cacheCallLayout;
  }

  /** A random first cache id per instance: another instance's ids are then unknown to this one's registry. */
  private seedCacheIds(): void {
    if (this.cacheIdsSeeded) return;
    this.wasm._mha_kv_cache_set_next_id(1 + Math.floor(Math.random() * 0xfffffff0));
    this.cacheIdsSeeded = true;
  }

  createKVCache(options: KVCacheOptions): KVCache {
    void this.cacheLayout; // throws for a module of another release
    const config = checkCacheOptions(this.wasm, options);
    this.seedCacheIds();
    return new WasmKVCache(this, createCache(this, config), config);
  }

  loadKVCache(bytes: Uint8Array, options?: LoadKVCacheOptions): KVCache {
    void this.cacheLayout; // throws for a module of another release
    this.seedCacheIds();
    const loaded = loadCache(this.wasm, this.arena, bytes, options);
    return new WasmKVCache(this, loaded.id, loaded.config, loaded.lengths, loaded.stored);
  }

  mergeAttention(
    parts: readonly AttentionState<Float32Array | HeapTensor>[],
    options: MergeAttentionOptions,
  ): AttentionState {
    return mergeAttention(this.wasm, parts, options);
  }

  attentionWeights(q: Float32Array, k: Float32Array, options: AttentionWeightsOptions): Float32Array {
    return attentionWeights(this, q, k, options);
  }

  splitHeads(x: Float32Array, shape: HeadShape): Float32Array {
    return this.permuteHeads('splitHeads', 'x', x, shape, true);
  }

  mergeHeads(xh: Float32Array, shape: HeadShape): Float32Array {
    return this.permuteHeads('mergeHeads', 'xh', xh, shape, false);
  }

  memoryStats(): { wasmMemoryBytes: number; heapBytesInUse: number } {
    return { wasmMemoryBytes: this.wasm.HEAPU8.length, heapBytesInUse: this.wasm.heapBytesInUse() };
  }

  dispose(): void {
    for (const tensor of this.tensors) MallocedTensor.release(tensor, 'dispose()');
    for (const cache of this.caches) WasmKVCache.release(cache, 'dispose()');
    this.wasm._mha_kv_cache_free_all();
    this.arena.release();
    if (this.wasm.PThread) {
      // Threaded build: join the pool's threads (later calls run on the calling thread), then terminate
      // every Web Worker / Node worker of this instance so that nothing keeps the process alive.
      this.wasm._mha_set_threads(1);
      this.wasm.PThread.terminateAllThreads();
      this.currentInfo = Object.freeze({ ...this.currentInfo, threads: 1 });
    }
    this.wasm.releaseScratch();
  }

  private permuteHeads(fn: string, name: string, x: Float32Array, shape: HeadShape, split: boolean): Float32Array {
    const o = checkOptionsObject(`${fn}: shape`, shape, HEAD_KEYS);
    const d = checkDims(fn, o, false);
    const length = d.batch * d.seqLen * d.dModel;
    const formula = split
      ? () => qFormula(d)
      : () => `batch*numHeads*seqLen*headDim = ${d.batch}*${d.numHeads}*${d.seqLen}*${d.headDim}`;
    checkArrayOnly(`${fn}: ${name}`, x, length, formula);
    const sizes = [length * 4, length * 4];
    const xOffset = x.byteOffset;
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const [fromAt, toAt] = layout(base, sizes) as [number, number];
    copyIn(this.wasm.HEAPF32, x, xOffset, 0, length, fromAt);
    const status = split
      ? this.wasm._mha_split_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads)
      : this.wasm._mha_merge_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads);
    checkStatus(this.wasm, fn, status);
    return copyOut(this.wasm.HEAPF32, toAt >>> 2, length);
  }
}
