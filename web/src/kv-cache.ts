// The KV cache (docs/spec.md Part 3): createKVCache's checks and the KVCache objects, which write the
// CacheAttendCallAbi struct (src/call_abi.hpp; its layout is read by call-abi.ts, offsets by field name
// from kvCacheAttendCallLayout, never copied by hand). The keys and values live on the instance's heap,
// owned by the C++ registry (src/mha/cache/kv_cache.hpp); an attend call stages q, k, v and out through the
// instance's StagingArena like the stateless call, writes the struct, and makes one direct wasm call.
import {
  checkAlibiSlopes,
  checkEmptyRows,
  checkRope,
  checkRopeRows,
  checkScale,
  checkSinks,
  checkSoftcap,
  checkTensorDType,
  checkWindow,
} from './attention-options.js';
import type { CacheCallLayout } from './call-abi.js';
import { saveCache } from './cache-io.js';
import { CACHE_DTYPE_NAME_LIST, CACHE_DTYPES, cacheDTypeCode } from './cache-dtype.js';
import { describe } from './describe.js';
import { halfResult } from './float16.js';
import { checkHalf, checkOperand, checkRopeStillUsable, checkStillUsable } from './heap-tensor.js';
import type { MhaWasmModule } from './mha.js';
import {
  byteOffsetOf,
  copyResult,
  layout,
  place,
  StagingArena,
  stageRope,
  totalBytes,
  unfilledFloat32Array,
} from './staging.js';
import type { Operand } from './staging.js';
import { checkStatus } from './status.js';
import type {
  KVCache,
  KVCacheAttendOptions,
  KVCacheContents,
  KVCacheDType,
  KVCacheOptions,
  KVCacheReadOptions,
} from './kv-cache-types.js';
import type { Float16Tensor, HeapTensor, TensorDType, TensorIn, TensorOut } from './tensor-types.js';
import { checkDim, checkOptionsObject } from './validate.js';

export const KV_CACHE_KEYS = ['batch', 'numKvHeads', 'headDim', 'capacity', 'dtype', 'vHeadDim'] as const;
const ATTEND_KEYS = [
  'numHeads',
  'causal',
  'window',
  'softcap',
  'alibiSlopes',
  'scale',
  'emptyRows',
  'out',
  'sinks',
  'rope',
  'dtype',
  'newTokens',
] as const;
const READ_KEYS = ['start', 'end'] as const;

/** `[a, b, c]` for a message: the first 8 entries of a length list. */
function listOf(values: ArrayLike<number>): string {
  const shown = Array.from({ length: Math.min(values.length, 8) }, (_, i) => values[i]);
  return `[${shown.join(', ')}${values.length > 8 ? ', ...' : ''}]`;
}

/**
 * An array (or Int32Array / other typed array) of `count` integers, entry b in [0, bound(b)], as an
 * Int32Array: newTokens of attend and the array form of truncate.
 */
function checkIntegerList(
  name: string,
  value: unknown,
  count: number,
  bound: (b: number) => number,
  expected: string,
): Int32Array {
  const isList = Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
  if (!isList) throw new TypeError(`${name}: expected ${expected}, got ${describe(value)}`);
  const list = value as ArrayLike<unknown>;
  if (list.length !== count) throw new RangeError(`${name}: expected ${expected}, got ${list.length} entries`);
  const out = new Int32Array(count);
  for (let b = 0; b < count; b++) {
    const entry = list[b];
    if (typeof entry !== 'number' && typeof entry !== 'bigint') {
      throw new TypeError(`${name}: entry ${b}: expected an integer in [0, ${bound(b)}], got ${describe(entry)}`);
    }
    const x = Number(entry);
    if (!Number.isInteger(x) || x < 0 || x > bound(b))
      throw new RangeError(`${name}: entry ${b}: expected an integer in [0, ${bound(b)}], got ${x}`);
    out[b] = x;
  }
  return out;
}

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
  if (value === undefined) return 'float32';
  if ((CACHE_DTYPES as readonly unknown[]).includes(value)) return value as KVCacheDType;
  const message = `${fn}: dtype: expected ${CACHE_DTYPE_NAME_LIST}, got ${describe(value)}`;
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

export function cacheBytes(wasm: MhaWasmModule, c: CacheConfig): number {
  return wasm._mha_kv_cache_bytes(c.batch, c.numKvHeads, c.headDim, c.capacity, cacheDTypeCode(c.dtype), valueDimOf(c));
}

/** The ABI's value_dim: 0 when Dv = Dh (what a cache without vHeadDim writes). */
const valueDimOf = (c: CacheConfig): number => (c.valueDim === c.headDim ? 0 : c.valueDim);

function tooLarge(c: CacheConfig, bytes: number, why = 'more than it can provide (2 GiB at most)'): RangeError {
  const dims =
    c.valueDim === c.headDim
      ? `batch*numKvHeads*capacity*headDim = ${c.batch}*${c.numKvHeads}*${c.capacity}*${c.headDim}`
      : `batch*numKvHeads*capacity*(headDim + vHeadDim) = ${c.batch}*${c.numKvHeads}*${c.capacity}*(${c.headDim} + ${c.valueDim})`;
  return new RangeError(
    `createKVCache: capacity: a ${c.dtype} cache of ${dims} needs ${bytes} bytes of wasm memory for its keys ` +
      `and values, ${why}`,
  );
}

/** Creates the C++ cache of a checked config and returns its id. */
export function createCache(host: CacheHost, config: CacheConfig): number {
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
    idAt,
  );
  // The dims passed the checks above, so what the core can still refuse is the memory (the heap cannot grow
  // that far, or the size check): said with the bytes and the core's own message.
  if (status !== 0)
    throw tooLarge(c, cacheBytes(wasm, c), `which the wasm core refused: ${wasm.statusMessage(status)}`);
  return wasm.HEAP32[idAt >>> 2]! >>> 0; // a uint32 id
}

/** A KV cache of one instance: the id of its C++ cache, 0 once freed. */
export class WasmKVCache implements KVCache {
  #host: CacheHost;
  #id: number;
  /** The per-sequence lengths, as the C++ cache holds them (every change goes through this class). */
  readonly #lengths: Int32Array;
  #freedBy = '';
  readonly #config: CacheConfig;
  readonly #bytes: number;

  constructor(host: CacheHost, id: number, config: CacheConfig, lengths?: Int32Array) {
    this.#host = host;
    this.#id = id;
    this.#config = config;
    this.#bytes = cacheBytes(host.wasm, config);
    this.#lengths = lengths ?? new Int32Array(config.batch);
    host.caches.add(this);
  }

  get length(): number {
    const first = this.#lengths[0]!;
    if (this.#lengths.some((x) => x !== first)) {
      throw new RangeError(
        `KVCache.length: the sequences have different lengths ${listOf(this.#lengths)}; read cache.lengths`,
      );
    }
    return first;
  }

  get lengths(): Int32Array {
    return this.#lengths.slice();
  }

  /** The cache's dims (for save and tests). */
  get config(): Readonly<CacheConfig> {
    return this.#config;
  }

  /** The C++ cache's id, for cache-io.ts; throws a TypeError naming `fn` once the cache was freed. */
  liveId(fn: string): number {
    this.#checkLive(fn);
    return this.#id;
  }

  get capacity(): number {
    return this.#config.capacity;
  }

  get dtype(): KVCacheDType {
    return this.#config.dtype;
  }

  /** The bytes of wasm memory the storage holds: what the core allocates for this config (int8 scales included). */
  get bytes(): number {
    return this.#bytes;
  }

  attend<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: KVCacheAttendOptions & { dtype?: D },
  ): TensorOut<D>;
  attend(
    q: Float32Array | HeapTensor | Float16Tensor,
    k: Float32Array | HeapTensor | Float16Tensor,
    v: Float32Array | HeapTensor | Float16Tensor,
    options: KVCacheAttendOptions,
  ): Float32Array | Float16Tensor {
    const fn = 'KVCache.attend';
    this.#checkLive(fn);
    const { wasm, arena, cacheLayout: L } = this.#host;
    const c = this.#config;
    const o = checkOptionsObject(`${fn}: options`, options, ATTEND_KEYS);
    const numHeads = checkDim(`${fn}: numHeads`, o.numHeads);
    if (numHeads % c.numKvHeads !== 0) {
      throw new RangeError(
        `${fn}: numHeads: expected a multiple of the cache's numKvHeads (${c.numKvHeads}), got ${numHeads}`,
      );
    }
    const half = checkTensorDType(fn, o.dtype) === 'float16';
    const check = (name: string, value: unknown, expected: number, formula: () => string): Operand =>
      half
        ? checkHalf(`${fn}: ${name}`, value, expected, formula)
        : checkOperand(`${fn}: ${name}`, value, expected, formula, wasm);
    const Dv = c.valueDim;
    // n, the new tokens, comes from k's length: (B, n, Hkv*Dh).
    const kvRow = c.batch * c.numKvHeads * c.headDim;
    const kGiven = (k as { length?: unknown } | null)?.length;
    const n = typeof kGiven === 'number' && kGiven > 0 && kGiven % kvRow === 0 ? kGiven / kvRow : 1;
    const kvFormula = () =>
      `batch*n*numKvHeads*headDim = ${c.batch}*n*${c.numKvHeads}*${c.headDim} for n >= 1 new tokens`;
    const kvLength = n * kvRow;
    const vLength = c.batch * n * c.numKvHeads * Dv;
    const kIn = check('k', k, kvLength, kvFormula);
    const vIn = check('v', v, vLength, () =>
      Dv === c.headDim
        ? `batch*n*numKvHeads*headDim = ${c.batch}*${n}*${c.numKvHeads}*${c.headDim}, the length of k`
        : `batch*n*numKvHeads*vHeadDim = ${c.batch}*${n}*${c.numKvHeads}*${Dv}, n = ${n} from k`,
    );
    const qLength = c.batch * n * numHeads * c.headDim;
    const qFormula = () =>
      `batch*n*numHeads*headDim = ${c.batch}*${n}*${numHeads}*${c.headDim} (n = ${n} new tokens, from k)`;
    const outLength = c.batch * n * numHeads * Dv;
    const outFormula =
      Dv === c.headDim
        ? qFormula
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
    const counts =
      o.newTokens === undefined
        ? undefined
        : checkIntegerList(
            `${fn}: newTokens`,
            o.newTokens,
            c.batch,
            () => n,
            `batch = ${c.batch} integers in [0, n = ${n}] (an Int32Array or an array)`,
          );
    const outValue = o.out;
    const outIn = outValue === undefined ? undefined : check('out', outValue, outLength, outFormula);
    for (const [name, input] of [
      ['q', qIn],
      ['k', kIn],
      ['v', vIn],
    ] as const) {
      if (typeof outIn === 'number' && outIn === input) {
        throw new TypeError(
          `${fn}: out: expected a HeapTensor other than ${name} (the kernel reads ${name} while it writes out), got ${name} itself`,
        );
      }
    }
    // Option getters are user code: the cache and the tensors are checked again once none can run.
    this.#checkLive(fn);
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kvLength);
    checkStillUsable(`${fn}: v`, v, vIn, vLength);
    if (outIn !== undefined) checkStillUsable(`${fn}: out`, outValue, outIn, outLength);
    if (rope) checkRopeStillUsable(fn, rope);
    const lengths = this.#lengths;
    const count = (b: number) => (counts ? counts[b]! : n);
    let firstRow = Infinity,
      ropeRows = 0,
      longest = 0; // positions [firstRow, ropeRows) hold the call's tokens
    for (let b = 0; b < c.batch; b++) {
      if (lengths[b]! + count(b) > c.capacity) {
        const which = c.batch > 1 ? ` of sequence ${b}` : '';
        throw new RangeError(
          `${fn}: k: ${count(b)} new tokens${which} would pass the cache's capacity: length ${lengths[b]} + ` +
            `${count(b)} > capacity ${c.capacity} (nothing was stored; truncate() or a larger cache makes room)`,
        );
      }
      firstRow = Math.min(firstRow, lengths[b]!);
      if (lengths[b]! + count(b) > ropeRows) [ropeRows, longest] = [lengths[b]! + count(b), b];
    }
    ropeRows = Math.max(ropeRows, firstRow);
    // Sequence b's queries and new keys are at positions [lengths[b], lengths[b] + n_b): only the rows
    // from the shortest sequence's length to the longest new end are staged.
    if (rope) {
      checkRopeRows(
        fn,
        rope,
        ropeRows,
        () =>
          c.batch > 1
            ? `the last new token's of sequence ${longest}, lengths[${longest}] + n - 1 = ${lengths[longest]} + ${count(longest)} - 1`
            : `the last new token's, length + n - 1 = ${lengths[0]} + ${n} - 1`,
        'nothing was stored',
      );
    }

    const staged = (operand: Operand | undefined, length: number) => (typeof operand === 'number' ? 0 : length * 4);
    const ropeBytes = rope ? (ropeRows - firstRow) * rope.half * 4 : 0;
    const sizes = [
      staged(qIn, qLength),
      staged(kIn, kvLength),
      staged(vIn, vLength),
      staged(outIn, outLength),
      alibiSlopes ? alibiSlopes.byteLength : 0,
      sinks ? sinks.byteLength : 0,
      ropeBytes,
      ropeBytes,
      counts ? counts.byteLength : 0,
    ];
    // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
    const [qOffset, kOffset, vOffset, outOffset] = [
      byteOffsetOf(qIn),
      byteOffsetOf(kIn),
      byteOffsetOf(vIn),
      byteOffsetOf(outIn),
    ];
    const base = arena.reserve(fn, totalBytes(sizes));
    const callAt = arena.callAt();
    const [qAt, kAt, vAt, outAt, alibiAt, sinksAt, cosAt, sinAt, countsAt] = layout(base, sizes) as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const heap = wasm.HEAPF32;
    const i32 = wasm.HEAP32;
    const at = callAt >>> 2;
    const qAddress = place(wasm, qIn, qOffset, 0, qLength, qAt);
    const kAddress = place(wasm, kIn, kOffset, 0, kvLength, kAt);
    const vAddress = place(wasm, vIn, vOffset, 0, vLength, vAt);
    if (alibiSlopes) heap.set(alibiSlopes, alibiAt >>> 2);
    if (sinks) heap.set(sinks, sinksAt >>> 2);
    if (rope) stageRope(heap, rope, firstRow, ropeRows, cosAt, sinAt);
    if (counts) i32.set(counts, countsAt >>> 2);
    i32[at + L.cache] = this.#id | 0; // a uint32 id in an int32 view
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
    i32[at + L.rope_first_position] = rope ? firstRow : 0;
    i32[at + L.new_token_counts] = counts ? countsAt : 0;
    checkStatus(wasm, fn, wasm._mha_kv_cache_attend(callAt));
    for (let b = 0; b < c.batch; b++) lengths[b]! += count(b);
    if (typeof outIn === 'number') return (outValue as HeapTensor).data;
    // The decode scratch may have grown memory: copyResult takes fresh views.
    const target = outIn ?? (half ? new Uint16Array(outLength) : unfilledFloat32Array(outLength));
    copyResult(wasm, target, outLength, outOffset, outAt, 0, outLength);
    if (target.length !== outLength) {
      // `out` viewed this heap and the staging malloc detached it: copyResult wrote where its elements are.
      return half
        ? new Uint16Array(wasm.HEAPU8.buffer, outOffset, outLength)
        : new Float32Array(wasm.HEAPF32.buffer, outOffset, outLength);
    }
    return half ? halfResult(outValue, target as Uint16Array, q) : (target as Float32Array);
  }

  truncate(n: number | Int32Array | readonly number[]): void {
    const fn = 'KVCache.truncate';
    this.#checkLive(fn);
    const { wasm, arena } = this.#host;
    const lengths = this.#lengths;
    if (typeof n === 'number') {
      const longest = Math.max(...lengths);
      if (!Number.isInteger(n) || n < 0 || n > longest) {
        throw new RangeError(`${fn}: n: expected an integer in [0, max(lengths) = ${longest}], got ${n}`);
      }
      checkStatus(wasm, fn, wasm._mha_kv_cache_truncate(this.#id, n));
      for (let b = 0; b < lengths.length; b++) lengths[b] = Math.min(lengths[b]!, n);
      return;
    }
    if (typeof n !== 'object' || n === null) {
      throw new TypeError(`${fn}: n: expected an integer or batch = ${lengths.length} integers, got ${describe(n)}`);
    }
    const wanted = checkIntegerList(
      `${fn}: n`,
      n,
      lengths.length,
      (b) => lengths[b]!,
      `batch = ${lengths.length} integers, entry b in [0, lengths[b]] (lengths = ${listOf(lengths)})`,
    );
    const at = arena.reserve(fn, wanted.byteLength);
    wasm.HEAP32.set(wanted, at >>> 2);
    checkStatus(wasm, fn, wasm._mha_kv_cache_truncate_each(this.#id, at));
    lengths.set(wanted);
  }

  read(options: KVCacheReadOptions = {}): KVCacheContents {
    const fn = 'KVCache.read';
    this.#checkLive(fn);
    const o = checkOptionsObject(`${fn}: options`, options, READ_KEYS);
    const shortest = Math.min(...this.#lengths);
    const bound = (name: string, value: unknown, fallback: number, low: number): number => {
      if (value === undefined) return fallback;
      const expected = `an integer in [${low}, min(lengths) = ${shortest}]`;
      if (typeof value !== 'number')
        throw new TypeError(`${fn}: ${name}: expected ${expected}, got ${describe(value)}`);
      if (!Number.isInteger(value) || value < low || value > shortest)
        throw new RangeError(`${fn}: ${name}: expected ${expected}, got ${value}`);
      return value;
    };
    const start = bound('start', o.start, 0, 0);
    const end = bound('end', o.end, shortest, start);
    const c = this.#config;
    const tokens = c.batch * (end - start) * c.numKvHeads;
    const [kLength, vLength] = [tokens * c.headDim, tokens * c.valueDim];
    const half = c.dtype === 'float16';
    const bytes = half ? 2 : 4;
    const { wasm, arena } = this.#host;
    const kAt = arena.reserve(fn, (kLength + vLength) * bytes + 16);
    const vAt = kAt + kLength * bytes;
    checkStatus(wasm, fn, wasm._mha_kv_cache_read(this.#id, kAt, vAt, start, end, 1));
    // Copies (slice) of fresh views: the arena's malloc may have grown memory.
    if (half) {
      return {
        k: new Uint16Array(wasm.HEAPU8.buffer, kAt, kLength).slice(),
        v: new Uint16Array(wasm.HEAPU8.buffer, vAt, vLength).slice(),
      };
    }
    return {
      k: new Float32Array(wasm.HEAPU8.buffer, kAt, kLength).slice(),
      v: new Float32Array(wasm.HEAPU8.buffer, vAt, vLength).slice(),
    };
  }

  save(): Uint8Array {
    return saveCache(this.#host.wasm, this.#host.arena, this.liveId('KVCache.save'));
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
    if (this.#id === 0)
      throw new TypeError(`${fn}: the KVCache was freed (by ${this.#freedBy}); create a new one with createKVCache`);
    if (!this.#host.caches.has(this)) throw new TypeError(`${fn}: the KVCache does not belong to a live instance`);
  }
}
