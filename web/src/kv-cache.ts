// The KV cache objects (docs/spec.md Part 3): a WasmKVCache holds the id of its C++ cache (the keys and
// values live on the instance's heap, owned by the registry of src/mha/cache/kv_cache.hpp) and the
// per-sequence lengths. createKVCache's checks are in kv-cache-config.ts, attend in kv-cache-attend.ts,
// save and load in cache-io.ts.
import { saveCache } from './cache-io.js';
import { describe } from './describe.js';
import { attendCache } from './kv-cache-attend.js';
import type { SharedPrefix } from './kv-cache-attend.js';
import { cacheBytes } from './kv-cache-config.js';
import type { CacheCallHost, CacheConfig } from './kv-cache-config.js';
import type {
  AttentionState,
  KVCache,
  KVCacheArithmetic,
  KVCacheAttendOptions,
  KVCacheContents,
  KVCacheDType,
  KVCacheReadOptions,
} from './kv-cache-types.js';
import { checkIntegerList, listOf } from './number-lists.js';
import { checkStatus } from './status.js';
import type { Float16Tensor, HeapTensor, TensorDType, TensorIn, TensorOut } from './tensor-types.js';
import { checkOptionsObject } from './validate.js';

const READ_KEYS = ['start', 'end'] as const;

/** What a cache needs of its instance: CacheCallHost and the registry of its live caches. */
export interface CacheHost extends CacheCallHost {
  readonly caches: Set<WasmKVCache>;
}

/** A KV cache of one instance: the id of its C++ cache, 0 once freed. */
export class WasmKVCache implements KVCache {
  #host: CacheHost;
  #id: number;
  /** The per-sequence lengths, as the C++ cache holds them (every change goes through this class). */
  readonly #lengths: Int32Array;
  /** The tokens each sequence holds: its length, or fewer once a ring dropped some. */
  readonly #stored: Int32Array;
  #freedBy = '';
  readonly #config: CacheConfig;
  readonly #bytes: number;

  constructor(host: CacheHost, id: number, config: CacheConfig, lengths?: Int32Array, stored?: Int32Array) {
    this.#host = host;
    this.#id = id;
    this.#config = config;
    this.#bytes = cacheBytes(host.wasm, config);
    this.#lengths = lengths ?? new Int32Array(config.batch);
    this.#stored = stored ?? this.#lengths.slice();
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

  get stored(): Int32Array {
    return this.#stored.slice();
  }

  get ring(): boolean {
    return this.#config.ring;
  }
  get arithmetic(): KVCacheArithmetic {
    return this.#config.arithmetic;
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

  /**
   * The bytes of wasm memory the storage holds: what the core allocates for this config (int8 and int4 scales
   * included).
   */
  get bytes(): number {
    return this.#bytes;
  }

  attend<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: KVCacheAttendOptions & { tensorDType?: D; dtype?: D; lse: true },
  ): AttentionState<TensorOut<D>>;
  attend<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: KVCacheAttendOptions & { tensorDType?: D; dtype?: D; lse?: Float32Array | HeapTensor },
  ): TensorOut<D>;
  attend(
    q: Float32Array | HeapTensor | Float16Tensor,
    k: Float32Array | HeapTensor | Float16Tensor,
    v: Float32Array | HeapTensor | Float16Tensor,
    options: KVCacheAttendOptions,
  ): Float32Array | Float16Tensor | AttentionState<Float32Array | Float16Tensor> {
    const fn = 'KVCache.attend';
    this.#checkLive(fn);
    const prefix = (value: unknown) => this.#checkPrefix(fn, value);
    const sequences = { lengths: this.#lengths, stored: this.#stored };
    return attendCache(this.#host, this.#config, sequences, () => this.liveId(fn), q, k, v, options, prefix);
  }

  /** attend's `prefix` (docs/spec.md 5.2): another live cache of this instance, one sequence, the same dims. */
  #checkPrefix(fn: string, value: unknown): SharedPrefix {
    const expected = `${fn}: prefix: expected another KVCache of this instance with batch 1`;
    if (!(value instanceof WasmKVCache)) throw new TypeError(`${expected}, got ${describe(value)}`);
    if (value === this) {
      throw new TypeError(`${expected}, got the cache itself (its tokens would come before themselves)`);
    }
    if (value.#host !== this.#host) throw new TypeError(`${expected}, got a KVCache of another instance`);
    if (value.#id === 0) throw new TypeError(`${expected}, got a KVCache freed by ${value.#freedBy}`);
    if (this.ring || value.ring) {
      const which = this.ring ? 'this cache is' : 'the prefix is';
      throw new TypeError(`${fn}: prefix: expected caches that are not rings (docs/spec.md 5.5), but ${which} a ring`);
    }
    const p = value.#config;
    const c = this.#config;
    if (p.batch !== 1) throw new TypeError(`${expected}, got one with batch ${p.batch}`);
    for (const [name, mine, theirs] of [
      ['numKvHeads', c.numKvHeads, p.numKvHeads],
      ['headDim', c.headDim, p.headDim],
      ['vHeadDim', c.valueDim, p.valueDim],
      ['dtype', c.dtype, p.dtype],
    ] as const) {
      if (mine !== theirs) {
        throw new TypeError(
          `${fn}: prefix: expected ${name} ${describe(mine)} as this cache's, got ${describe(theirs)}`,
        );
      }
    }
    return { length: value.#lengths[0]!, liveId: () => value.liveId(`${fn}: prefix`) };
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
      this.#checkRingTruncate(fn, (b) => Math.min(lengths[b]!, n));
      checkStatus(wasm, fn, wasm._mha_kv_cache_truncate(this.#id, n));
      this.#setLengths((b) => Math.min(lengths[b]!, n));
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
    this.#checkRingTruncate(fn, (b) => wanted[b]!);
    const at = arena.reserve(fn, wanted.byteLength);
    wasm.HEAP32.set(wanted, at >>> 2);
    checkStatus(wasm, fn, wasm._mha_kv_cache_truncate_each(this.#id, at));
    this.#setLengths((b) => wanted[b]!);
  }

  /** A ring's truncate may remove only tokens it holds: lengths[b] - stored[b] <= the new length. */
  #checkRingTruncate(fn: string, wanted: (b: number) => number): void {
    for (let b = 0; b < this.#lengths.length; b++) {
      const first = this.#lengths[b]! - this.#stored[b]!;
      if (wanted(b) < first) {
        const which = this.#lengths.length > 1 ? ` of sequence ${b}` : '';
        throw new RangeError(
          `${fn}: n: expected at least ${first}${which}, the first position the ring still holds ` +
            `(lengths[${b}] - stored[${b}] = ${this.#lengths[b]} - ${this.#stored[b]}), ` +
            `got ${wanted(b)}; nothing was removed`,
        );
      }
    }
  }

  /** Sets each sequence's length after a truncate; its stored count loses as many tokens. */
  #setLengths(length: (b: number) => number): void {
    for (let b = 0; b < this.#lengths.length; b++) {
      const next = length(b);
      this.#stored[b] -= this.#lengths[b]! - next;
      this.#lengths[b] = next;
    }
  }

  reorder(indices: Int32Array | readonly number[]): void {
    const fn = 'KVCache.reorder';
    this.#checkLive(fn);
    const { wasm, arena } = this.#host;
    const lengths = this.#lengths;
    const batch = lengths.length;
    const wanted = checkIntegerList(
      `${fn}: indices`,
      indices,
      batch,
      () => batch - 1,
      `batch = ${batch} integers in [0, ${batch - 1}] (an Int32Array or an array)`,
    );
    const at = arena.reserve(fn, wanted.byteLength);
    wasm.HEAP32.set(wanted, at >>> 2);
    checkStatus(wasm, fn, wasm._mha_kv_cache_reorder(this.#id, at));
    const [lengthsBefore, storedBefore] = [lengths.slice(), this.#stored.slice()];
    for (let b = 0; b < batch; b++) {
      lengths[b] = lengthsBefore[wanted[b]!]!;
      this.#stored[b] = storedBefore[wanted[b]!]!;
    }
  }

  read(options: KVCacheReadOptions = {}): KVCacheContents {
    const fn = 'KVCache.read';
    this.#checkLive(fn);
    const o = checkOptionsObject(`${fn}: options`, options, READ_KEYS);
    const shortest = Math.min(...this.#lengths);
    // The first position every sequence holds: 0, or past what a ring dropped (docs/spec.md 5.5).
    const first = Math.max(...Array.from(this.#lengths, (length, b) => length - this.#stored[b]!));
    const low = first > 0 ? `max(lengths - stored) = ${first}` : '0';
    if (first > shortest) {
      throw new RangeError(
        `${fn}: options: the ring's sequences hold no position in common ` +
          `(positions [${low}, min(lengths) = ${shortest}) are empty)`,
      );
    }
    const bound = (name: string, value: unknown, fallback: number, from: number): number => {
      if (value === undefined) return fallback;
      const expected = `an integer in [${from === first ? low : from}, min(lengths) = ${shortest}]`;
      if (typeof value !== 'number')
        throw new TypeError(`${fn}: ${name}: expected ${expected}, got ${describe(value)}`);
      if (!Number.isInteger(value) || value < from || value > shortest)
        throw new RangeError(`${fn}: ${name}: expected ${expected}, got ${value}`);
      return value;
    };
    const start = bound('start', o.start, first, first);
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
