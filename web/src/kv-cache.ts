// The KV cache (docs/spec.md Part 3): createKVCache's checks and the KVCache objects, which write the
// CacheAttendCallAbi struct (src/call_abi.hpp; its layout is read by call-abi.ts, offsets by field name
// from kvCacheAttendCallLayout, never copied by hand). The keys and values live on the instance's heap,
// owned by the C++ registry (src/mha/kv_cache.hpp); an attend call stages q, k, v and out through the
// instance's StagingArena like the stateless call, writes the struct, and makes one direct wasm call.
import { checkAlibiSlopes, checkEmptyRows, checkRope, checkRopeRows, checkScale, checkSinks, checkSoftcap, checkTensorDType,
  checkWindow } from './attention-options.js';
import type { CacheCallLayout } from './call-abi.js';
import { describe } from './describe.js';
import { halfResult } from './float16.js';
import { checkHalf, checkOperand, checkRopeStillUsable, checkStillUsable } from './heap-tensor.js';
import type { MhaWasmModule } from './mha.js';
import { byteOffsetOf, copyResult, layout, place, StagingArena, stageRope, totalBytes, unfilledFloat32Array } from './staging.js';
import type { Operand } from './staging.js';
import { checkStatus } from './status.js';
import type { KVCache, KVCacheAttendOptions, KVCacheDType, KVCacheOptions } from './types.js';
import type { Float16Tensor, HeapTensor, TensorDType, TensorIn, TensorOut } from './tensor-types.js';
import { checkDim, checkOptionsObject } from './validate.js';

export const KV_CACHE_KEYS = ['batch', 'numKvHeads', 'headDim', 'capacity', 'dtype', 'vHeadDim'] as const;
const ATTEND_KEYS = ['numHeads', 'causal', 'window', 'softcap', 'alibiSlopes', 'scale', 'emptyRows', 'out', 'sinks', 'rope',
  'dtype'] as const;

/** What a cache needs of its instance: the module, the staging arena, the call layout and its registry. */
export interface CacheHost {
  readonly wasm: MhaWasmModule;
  readonly arena: StagingArena;
  readonly cacheLayout: CacheCallLayout;
  readonly caches: Set<WasmKVCache>;
}

export interface CacheConfig {
  batch: number;
  numKvHeads: number;
  headDim: number;
  capacity: number;
  dtype: KVCacheDType;
  /** Dv: the vHeadDim option, or headDim. */
  valueDim: number;
}

function checkDType(fn: string, value: unknown): KVCacheDType {
  if (value === undefined || value === 'float32') return 'float32';
  if (value === 'float16') return 'float16';
  const message = `${fn}: dtype: expected 'float32' or 'float16', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/** Checks createKVCache's options (dims, dtype, and the bytes the storage needs against the 2 GiB heap). */
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
  };
  config.valueDim = o.vHeadDim === undefined ? config.headDim : checkDim(`${fn}: vHeadDim`, o.vHeadDim);
  const bytes = cacheBytes(wasm, config);
  if (!(bytes < 2 ** 31)) throw tooLarge(config, bytes);
  return config;
}

function cacheBytes(wasm: MhaWasmModule, c: CacheConfig): number {
  return wasm._mha_kv_cache_bytes(c.batch, c.numKvHeads, c.headDim, c.capacity, c.dtype === 'float16' ? 1 : 0, valueDimOf(c));
}

/** The ABI's value_dim: 0 when Dv = Dh (what a cache without vHeadDim writes). */
const valueDimOf = (c: CacheConfig): number => (c.valueDim === c.headDim ? 0 : c.valueDim);

function tooLarge(c: CacheConfig, bytes: number, why = 'more than it can provide (2 GiB at most)'): RangeError {
  const dims = c.valueDim === c.headDim ? `batch*numKvHeads*capacity*headDim = ${c.batch}*${c.numKvHeads}*${c.capacity}*${c.headDim}`
    : `batch*numKvHeads*capacity*(headDim + vHeadDim) = ${c.batch}*${c.numKvHeads}*${c.capacity}*(${c.headDim} + ${c.valueDim})`;
  return new RangeError(`createKVCache: capacity: a ${c.dtype} cache of ${dims} needs ${bytes} bytes of wasm memory for its keys ` +
    `and values, ${why}`);
}

/** Creates the C++ cache of a checked config and returns its id. */
export function createCache(host: CacheHost, config: CacheConfig): number {
  const { wasm, arena } = host;
  const idAt = arena.reserve('createKVCache', 16);
  wasm.HEAP32[idAt >>> 2] = 0;
  const c = config;
  const status = wasm._mha_kv_cache_create(c.batch, c.numKvHeads, c.headDim, c.capacity, c.dtype === 'float16' ? 1 : 0, valueDimOf(c),
    idAt);
  // The dims passed the checks above, so what the core can still refuse is the memory (the heap cannot grow
  // that far, or the size check): said with the bytes and the core's own message.
  if (status !== 0) throw tooLarge(c, cacheBytes(wasm, c), `which the wasm core refused: ${wasm.statusMessage(status)}`);
  return wasm.HEAP32[idAt >>> 2]! >>> 0;  // a uint32 id
}

/** A KV cache of one instance: the id of its C++ cache, 0 once freed. */
export class WasmKVCache implements KVCache {
  #host: CacheHost;
  #id: number;
  #length = 0;
  #freedBy = '';
  readonly #config: CacheConfig;

  constructor(host: CacheHost, id: number, config: CacheConfig) {
    this.#host = host;
    this.#id = id;
    this.#config = config;
    host.caches.add(this);
  }

  get length(): number {
    return this.#length;
  }

  get capacity(): number {
    return this.#config.capacity;
  }

  get dtype(): KVCacheDType {
    return this.#config.dtype;
  }

  attend<D extends TensorDType = 'float32'>(q: TensorIn<D>, k: TensorIn<D>, v: TensorIn<D>,
    options: KVCacheAttendOptions & { dtype?: D }): TensorOut<D>;
  attend(q: Float32Array | HeapTensor | Float16Tensor, k: Float32Array | HeapTensor | Float16Tensor,
    v: Float32Array | HeapTensor | Float16Tensor, options: KVCacheAttendOptions): Float32Array | Float16Tensor {
    const fn = 'KVCache.attend';
    this.#checkLive(fn);
    const { wasm, arena, cacheLayout: L } = this.#host;
    const c = this.#config;
    const o = checkOptionsObject(`${fn}: options`, options, ATTEND_KEYS);
    const numHeads = checkDim(`${fn}: numHeads`, o.numHeads);
    if (numHeads % c.numKvHeads !== 0) {
      throw new RangeError(`${fn}: numHeads: expected a multiple of the cache's numKvHeads (${c.numKvHeads}), got ${numHeads}`);
    }
    const half = checkTensorDType(fn, o.dtype) === 'float16';
    const check = (name: string, value: unknown, expected: number, formula: () => string): Operand =>
      half ? checkHalf(`${fn}: ${name}`, value, expected, formula) : checkOperand(`${fn}: ${name}`, value, expected, formula, wasm);
    const Dv = c.valueDim;
    // n, the new tokens, comes from k's length: (B, n, Hkv*Dh).
    const kvRow = c.batch * c.numKvHeads * c.headDim;
    const kGiven = (k as { length?: unknown } | null)?.length;
    const n = typeof kGiven === 'number' && kGiven > 0 && kGiven % kvRow === 0 ? kGiven / kvRow : 1;
    const kvFormula = () => `batch*n*numKvHeads*headDim = ${c.batch}*n*${c.numKvHeads}*${c.headDim} for n >= 1 new tokens`;
    const kvLength = n * kvRow;
    const vLength = c.batch * n * c.numKvHeads * Dv;
    const kIn = check('k', k, kvLength, kvFormula);
    const vIn = check('v', v, vLength, () => (Dv === c.headDim
      ? `batch*n*numKvHeads*headDim = ${c.batch}*${n}*${c.numKvHeads}*${c.headDim}, the length of k`
      : `batch*n*numKvHeads*vHeadDim = ${c.batch}*${n}*${c.numKvHeads}*${Dv}, n = ${n} from k`));
    const qLength = c.batch * n * numHeads * c.headDim;
    const qFormula = () => `batch*n*numHeads*headDim = ${c.batch}*${n}*${numHeads}*${c.headDim} (n = ${n} new tokens, from k)`;
    const outLength = c.batch * n * numHeads * Dv;
    const outFormula = Dv === c.headDim ? qFormula
      : () => `batch*n*numHeads*vHeadDim = ${c.batch}*${n}*${numHeads}*${Dv} (n = ${n} new tokens, from k)`;
    const qIn = check('q', q, qLength, qFormula);
    const causal = o.causal === undefined ? true : o.causal;
    if (typeof causal !== 'boolean') throw new TypeError(`${fn}: causal: expected a boolean, got ${describe(causal)}`);
    const [windowLeft, windowRight] = checkWindow(fn, o.window);
    const softcap = checkSoftcap(fn, o.softcap);
    const alibiSlopes = checkAlibiSlopes(fn, o.alibiSlopes, { numHeads });
    const scale = checkScale(fn, o.scale, c.headDim);
    const emptyRows = checkEmptyRows(fn, o.emptyRows);
    const sinks = checkSinks(fn, o.sinks, { numHeads });
    const rope = checkRope(fn, o.rope, c.headDim);
    const outValue = o.out;
    const outIn = outValue === undefined ? undefined : check('out', outValue, outLength, outFormula);
    for (const [name, input] of [['q', qIn], ['k', kIn], ['v', vIn]] as const) {
      if (typeof outIn === 'number' && outIn === input) {
        throw new TypeError(`${fn}: out: expected a HeapTensor other than ${name} (the kernel reads ${name} while it writes out), got ${name} itself`);
      }
    }
    // Option getters are user code: the cache and the tensors are checked again once none can run.
    this.#checkLive(fn);
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kvLength);
    checkStillUsable(`${fn}: v`, v, vIn, vLength);
    if (outIn !== undefined) checkStillUsable(`${fn}: out`, outValue, outIn, outLength);
    if (rope) checkRopeStillUsable(fn, rope);
    if (this.#length + n > c.capacity) {
      throw new RangeError(`${fn}: k: ${n} new tokens would pass the cache's capacity: length ${this.#length} + ${n} > ` +
        `capacity ${c.capacity} (nothing was stored; truncate() or a larger cache makes room)`);
    }
    // The call's queries and new keys are at positions [length, length + n): only those rows are staged.
    const ropeRows = this.#length + n;
    if (rope) checkRopeRows(fn, rope, ropeRows, () => `the last new token's, length + n - 1 = ${this.#length} + ${n} - 1`,
      'nothing was stored');

    const staged = (operand: Operand | undefined, length: number) => (typeof operand === 'number' ? 0 : length * 4);
    const ropeBytes = rope ? n * rope.half * 4 : 0;
    const sizes = [staged(qIn, qLength), staged(kIn, kvLength), staged(vIn, vLength), staged(outIn, outLength),
      alibiSlopes ? alibiSlopes.byteLength : 0, sinks ? sinks.byteLength : 0, ropeBytes, ropeBytes];
    // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
    const [qOffset, kOffset, vOffset, outOffset] = [byteOffsetOf(qIn), byteOffsetOf(kIn), byteOffsetOf(vIn), byteOffsetOf(outIn)];
    const base = arena.reserve(fn, totalBytes(sizes));
    const callAt = arena.callAt();
    const [qAt, kAt, vAt, outAt, alibiAt, sinksAt, cosAt, sinAt] = layout(base, sizes) as
      [number, number, number, number, number, number, number, number];
    const heap = wasm.HEAPF32;
    const i32 = wasm.HEAP32;
    const at = callAt >>> 2;
    const qAddress = place(wasm, qIn, qOffset, 0, qLength, qAt);
    const kAddress = place(wasm, kIn, kOffset, 0, kvLength, kAt);
    const vAddress = place(wasm, vIn, vOffset, 0, vLength, vAt);
    if (alibiSlopes) heap.set(alibiSlopes, alibiAt >>> 2);
    if (sinks) heap.set(sinks, sinksAt >>> 2);
    if (rope) stageRope(heap, rope, this.#length, ropeRows, cosAt, sinAt);
    i32[at + L.cache] = this.#id | 0;  // a uint32 id in an int32 view
    i32[at + L.q] = qAddress;
    i32[at + L.k] = kAddress;
    i32[at + L.v] = vAddress;
    i32[at + L.out] = typeof outIn === 'number' ? outIn : outAt;
    i32[at + L.alibi_slopes] = alibiSlopes ? alibiAt : 0;
    i32[at + L.new_tokens] = n;
    i32[at + L.num_heads] = numHeads;
    i32[at + L.causal] = causal ? 1 : 0;
    i32[at + L.window_left] = windowLeft;
    i32[at + L.window_right] = windowRight;
    i32[at + L.empty_rows] = emptyRows;
    heap[at + L.scale] = scale;
    heap[at + L.softcap] = softcap;
    i32[at + L.sinks] = sinks ? sinksAt : 0;
    i32[at + L.rope_cos] = rope ? cosAt : 0;
    i32[at + L.rope_sin] = rope ? sinAt : 0;
    i32[at + L.rope_positions] = rope ? ropeRows : 0;
    i32[at + L.rope_rotary_dim] = rope ? rope.rotaryDim : 0;
    i32[at + L.rope_interleaved] = rope?.interleaved ? 1 : 0;
    i32[at + L.rope_first_position] = rope ? this.#length : 0;
    checkStatus(wasm, fn, wasm._mha_kv_cache_attend(callAt));
    this.#length += n;
    if (typeof outIn === 'number') return (outValue as HeapTensor).data;
    // The decode scratch may have grown memory: copyResult takes fresh views.
    const target = outIn ?? (half ? new Uint16Array(outLength) : unfilledFloat32Array(outLength));
    copyResult(wasm, target, outLength, outOffset, outAt, 0, outLength);
    if (target.length !== outLength) {
      // `out` viewed this heap and the staging malloc detached it: copyResult wrote where its elements are.
      return half ? new Uint16Array(wasm.HEAPU8.buffer, outOffset, outLength) : new Float32Array(wasm.HEAPF32.buffer, outOffset, outLength);
    }
    return half ? halfResult(outValue, target as Uint16Array, q) : target as Float32Array;
  }

  truncate(n: number): void {
    const fn = 'KVCache.truncate';
    this.#checkLive(fn);
    if (typeof n !== 'number') throw new TypeError(`${fn}: n: expected an integer in [0, length = ${this.#length}], got ${describe(n)}`);
    if (!Number.isInteger(n) || n < 0 || n > this.#length) {
      throw new RangeError(`${fn}: n: expected an integer in [0, length = ${this.#length}], got ${n}`);
    }
    checkStatus(this.#host.wasm, fn, this.#host.wasm._mha_kv_cache_truncate(this.#id, n));
    this.#length = n;
  }

  free(): void {
    WasmKVCache.release(this, 'free()');
  }

  /** Frees the C++ cache (once; later frees do nothing) and remembers why, for the error of a later use. */
  static release(cache: WasmKVCache, by: string): void {
    if (cache.#id === 0) return;
    cache.#host.wasm._mha_kv_cache_free(cache.#id);
    cache.#host.caches.delete(cache);
    cache.#id = 0;
    cache.#freedBy = by;
  }

  #checkLive(fn: string): void {
    if (this.#id === 0) throw new TypeError(`${fn}: the KVCache was freed (by ${this.#freedBy}); create a new one with createKVCache`);
    if (!this.#host.caches.has(this)) throw new TypeError(`${fn}: the KVCache does not belong to a live instance`);
  }

}
