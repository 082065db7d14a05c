// The public types of the KV cache (docs/spec.md Part 3, 4.6, 4.7): the options of createKVCache,
// attend, read and loadKVCache and the KVCache interface. No runtime code; kv-cache.ts and
// kv-cache-attend.ts implement them.
// Shapes: B sequences (batch), n new tokens per call, T tokens held, H query heads, Hkv KV heads, Dh head
// size, Dv value head size.
import type { Float16Tensor, HeapTensor, RopeOptions, TensorDType, TensorIn, TensorOut } from './tensor-types.js';

/**
 * How a {@link KVCache} stores keys and values (docs/spec.md 4.8, 5.1): float32; IEEE binary16 (rounded to
 * nearest even, overflow to ±Infinity); bfloat16; int8 (q in [−127, 127]) or int4 (q in [−7, 7], two per
 * byte), each with one float32 scale per block of 32 values along a token's head row (an int8 or int4 cache
 * refuses a non-finite k or v row with a RangeError, storing nothing).
 */
export type KVCacheDType = 'float32' | 'float16' | 'bfloat16' | 'int8' | 'int4';

/**
 * How attend computes over an int8 or int4 cache (docs/spec.md 5.1): 'float' (the default), float32
 * attention over the values as read back, exactly as for the other dtypes; or 'integer', the same attention
 * with exact integer dot products over the stored integers (q and the softmax weights brought to 16-bit
 * integers), within |out - exact| <= 1e-3·max|v| + 1e-6 and |lse - exact| <= 1e-3 of the float64 attention over
 * the read-back values, and bit-identical in every build, engine and thread count.
 */
export type KVCacheArithmetic = 'float' | 'integer';

/** Options of {@link MHA.createKVCache} (docs/spec.md Part 3). */
export interface KVCacheOptions {
  /** B: sequences (batch items). Each has its own length (docs/spec.md 4.6). */
  batch: number;
  /** Hkv: key/value heads. A query may have any multiple of them as heads (grouped-query attention). */
  numKvHeads: number;
  /** Dh: the size of one head. */
  headDim: number;
  /** Tokens per batch item the cache can hold; appending past it is a RangeError that changes nothing. */
  capacity: number;
  /** Storage type, default `'float32'`. The math always runs in float32 on the exact stored values. */
  dtype?: KVCacheDType;
  /**
   * Dv, the size of a value head (docs/spec.md 4.1): a positive integer, default headDim. attend's v is
   * then (batch, n, numKvHeads * vHeadDim) and its out (batch, n, numHeads * vHeadDim).
   */
  vHeadDim?: number;
  /**
   * A ring cache (docs/spec.md 5.5; ONNX TensorScatter's circular mode): each sequence keeps only its last
   * `capacity` tokens, and appending past the capacity overwrites the oldest instead of failing. For
   * sliding-window layers: every `attend` then needs a `window` [W, ...] with W + n <= capacity (and W at most
   * what a sequence still stores), and gives what a cache holding every token gives. `lengths` count every
   * token appended (the next position: rope, ALiBi and causality use true positions), `stored` the tokens
   * held. Not combined with `prefix`. Default false.
   */
  ring?: boolean;
  /**
   * int8 and int4 caches only ({@link KVCacheArithmetic}): 'float' (default) or 'integer'. Set for another
   * dtype: a TypeError.
   */
  arithmetic?: KVCacheArithmetic;
}

/** Options of {@link KVCache.attend}: the options of docs/spec.md Part 2 that apply to a cache. */
export interface KVCacheAttendOptions {
  /** H: query heads, a multiple of the cache's numKvHeads. */
  numHeads: number;
  /** Default **true**: query i of sequence b, at position lengths[b] + i, sees keys at positions <= its own. */
  causal?: boolean;
  /**
   * [left, right]: a query at position p sees keys in [p - left, p + right]; each a non-negative integer or Infinity.
   */
  window?: [number, number];
  /** c > 0: each score s becomes c * tanh(s / c). */
  softcap?: number;
  /** One finite slope per query head: score - slope[h] * |p - j|. */
  alibiSlopes?: Float32Array | number[];
  /** Multiplies q·k; default 1/sqrt(headDim). */
  scale?: number;
  /** A query row with no visible key: NaN (default `'nan'`) or `'zero'`. */
  emptyRows?: 'nan' | 'zero';
  /**
   * Attention sinks (docs/spec.md 4.4): numHeads finite numbers, one extra logit per query head with no
   * value row, as in {@link AttentionBaseOptions.sinks}. Wrong length or a non-finite entry: RangeError.
   */
  sinks?: Float32Array | readonly number[];
  /**
   * Rotary position embedding (docs/spec.md 4.5), as in {@link AttentionBaseOptions.rope}: the call's query
   * row i rotates at position length + i, and each new key once, when it is stored, at its cache position
   * (the cache keeps rotated keys). Use the same tables on every call of a cache. A position past the
   * tables (length + n > P) is a RangeError that stores nothing.
   */
  rope?: RopeOptions;
  /**
   * The element type of q, k, v and out: `'float32'` (default) or `'float16'` (each a {@link Float16Tensor},
   * widened exactly as it is staged; out rounded once to binary16). Independent of the cache's own storage
   * dtype ({@link KVCacheOptions.dtype}): float16 k and v into a float16 cache are stored as given.
   */
  tensorDType?: TensorDType;
  /**
   * The old name of {@link KVCacheAttendOptions.tensorDType}, still accepted: the same option. Given with
   * tensorDType, both must be the same (else a TypeError naming both).
   * @deprecated Use `tensorDType`: `dtype` also names the cache's storage type in createKVCache.
   */
  dtype?: TensorDType;
  /**
   * Where to write the (batch, n, numHeads*vHeadDim) result: a Float32Array or a HeapTensor of this
   * instance; with `tensorDType: 'float16'` a Uint16Array or Float16Array.
   */
  out?: Float32Array | HeapTensor | Float16Tensor;
  /**
   * The attention state's log-sum-exp (docs/spec.md 5.3), (batch, numHeads, n) float32: row (b, h, i) is
   * m + ln Σ_j exp(s_j − m) over its visible keys and the sink (natural log), −∞ for an empty row and for a
   * padding row (newTokens). `true`: attend returns `{ out, lse }` with a new Float32Array; a Float32Array
   * or a HeapTensor of batch·numHeads·n floats: written there, attend returns out. With {@link
   * MHA.mergeAttention} two attentions over disjoint keys combine exactly.
   */
  lse?: true | Float32Array | HeapTensor;
  /**
   * Sequences of different lengths (docs/spec.md 4.6, FlashAttention's `cache_seqlens`): batch integers,
   * entry b in [0, n], how many of the n rows of sequence b are real. Rows at index >= newTokens[b] are
   * padding: their k and v are not stored, nothing is computed for them and their out rows are 0.
   * Sequence b's real rows take positions lengths[b] + i. Default: n for every sequence.
   */
  newTokens?: Int32Array | readonly number[];
  /**
   * A shared prefix (docs/spec.md 5.2, FlashInfer's cascade attention): another KVCache of this instance
   * with batch 1 and the same numKvHeads, headDim, vHeadDim and dtype, read and never written. Its Lp
   * tokens come before every sequence's own: sequence b sees the prefix's keys at positions [0, Lp) and
   * its own at Lp + j, its queries sit at Lp + lengths[b] + i (causal, window, ALiBi, and the rope tables'
   * rows). Several samples of one prompt then hold and read the prompt once: a decode step reads the
   * prefix's bytes once for all sequences. `lengths`, `read` and `save` still cover the cache's own tokens.
   * A prefix that does not match, is freed, or is the cache itself: TypeError.
   */
  prefix?: KVCache;
}

/**
 * An attention state (docs/spec.md 5.3): out (batch, n, numHeads·Dv) and lse (batch, numHeads, n), what
 * {@link KVCache.attend} returns with `lse: true` and what {@link MHA.mergeAttention} takes and returns.
 */
export interface AttentionState<T = Float32Array> {
  out: T;
  lse: Float32Array;
}

/** Options of {@link KVCache.read}: tokens [start, end) of every sequence. */
export interface KVCacheReadOptions {
  /** Default 0. */
  start?: number;
  /** Default and at most min(lengths). */
  end?: number;
}

/**
 * What {@link KVCache.read} returns: k (batch, end - start, numKvHeads * headDim) and v (batch, end -
 * start, numKvHeads * vHeadDim), ONNX's present_key / present_value in the (B, T, H*D) layout. Keys as
 * stored: rotated when `rope` was used. float32, bfloat16, int8 and int4 caches give Float32Arrays (the
 * stored values, decoded exactly), float16 caches the binary16 bits as Uint16Arrays.
 */
export interface KVCacheContents<T extends Float32Array | Uint16Array = Float32Array | Uint16Array> {
  k: T;
  v: T;
}

/** Options of {@link MHA.loadKVCache}. */
export interface LoadKVCacheOptions {
  /**
   * Tokens per sequence the new cache can hold: at least the longest saved sequence; default the saved cache's
   * capacity.
   */
  capacity?: number;
  /**
   * The loaded cache's {@link KVCacheArithmetic} (a save does not hold one): 'integer' needs an int8 or int4
   * save (else a TypeError); default 'float'.
   */
  arithmetic?: KVCacheArithmetic;
}

/**
 * Keys and values of a decoder's past tokens, on the instance's wasm heap (docs/spec.md Part 3). Made by
 * {@link MHA.createKVCache}; freed by {@link KVCache.free} or {@link MHA.dispose}.
 */
export interface KVCache {
  /**
   * Tokens stored per sequence (0 when created), while every sequence has the same length; reading it
   * when they differ is a RangeError (use {@link KVCache.lengths}).
   */
  readonly length: number;
  /** A copy of the batch per-sequence lengths: the tokens appended, the next position. */
  readonly lengths: Int32Array;
  /**
   * A copy of the tokens each sequence holds, those at positions [lengths[b] - stored[b], lengths[b]): its
   * length, or for a ring cache at most its capacity.
   */
  readonly stored: Int32Array;
  /** Whether the cache is a ring ({@link KVCacheOptions.ring}). */
  readonly ring: boolean;
  /** How attend computes ({@link KVCacheOptions.arithmetic}): 'float' unless created or loaded as 'integer'. */
  readonly arithmetic: KVCacheArithmetic;
  readonly capacity: number;
  readonly dtype: KVCacheDType;
  /**
   * The bytes of wasm memory the cache's storage holds, exactly what the core allocates for its options
   * (per token per KV head with Dv = Dh: float32 8·Dh, float16 and bfloat16 4·Dh, int8 2·Dh + 8·ceil(Dh/32),
   * int4 Dh + 8·ceil(Dh/32), scales included; docs/spec.md 4.8, 5.1).
   */
  readonly bytes: number;
  /**
   * Stores sequence b's new tokens' k and v at positions [lengths[b], lengths[b] + n_b), adds n_b to its
   * length (n_b = n, or newTokens[b]), and returns the attention of q over all of its stored keys, with
   * query positions starting at its old length. A prefill of S tokens followed by single-token steps
   * gives what one stateless causal call over the whole sequence gives, up to float rounding; each
   * sequence of a batch gives what it gives alone in a batch of 1.
   *
   * @param q - (batch, n, numHeads * headDim): a Float32Array or a HeapTensor of this instance
   *   (tensorDType 'float16': a Uint16Array or Float16Array)
   * @param k - (batch, n, numKvHeads * headDim), n >= 1: its length gives n
   * @param v - (batch, n, numKvHeads * vHeadDim)
   * @param options - numHeads and the options of {@link KVCacheAttendOptions}
   * @returns (batch, n, numHeads * vHeadDim): `options.out` (a HeapTensor's `data`), else a new Float32Array
   *   (tensorDType 'float16': a new Uint16Array, or Float16Array when q is one)
   * @throws TypeError when an argument has the wrong type (or kind for the tensorDType), or a HeapTensor was
   *   freed or is another instance's, when tensorDType and its alias dtype are both given and differ, or
   *   when the cache was freed (by `free()` or its instance's `dispose()`)
   * @throws RangeError when a length or option is wrong (sinks, rope, newTokens), numHeads is not a
   *   multiple of numKvHeads, the tokens would pass `capacity` or the rope tables' rows (then nothing is
   *   stored)
   * @example
   * ```ts
   * const cache = mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 64, capacity: 1024 });
   * const first = cache.attend(qPrompt, kPrompt, vPrompt, { numHeads: 8 }); // prefill
   * const next = cache.attend(qToken, kToken, vToken, { numHeads: 8 });     // one decode step
   * ```
   */
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
  /**
   * Rollback for speculative decoding or beam search, in O(batch): a number n keeps min(lengths[b], n)
   * tokens of every sequence; an array sets each sequence's length.
   * @param n - an integer in [0, max(lengths)] (0 resets the cache), or batch integers, entry b in
   *   [0, lengths[b]]
   * @throws TypeError / RangeError for another n (nothing changes); TypeError when the cache was freed
   */
  truncate(n: number | Int32Array | readonly number[]): void;
  /**
   * Beam search (docs/spec.md 5.4, FlashAttention's `cache_batch_idx`): afterwards sequence b holds what
   * sequence `indices[b]` held, its tokens and length; an index may repeat (a beam kept twice) or be left
   * out (a beam dropped). Moves only the sequences that change, and of each only its stored tokens.
   * @param indices - batch integers in [0, batch)
   * @throws TypeError / RangeError for a wrong length, a non-integer or an index out of range (nothing
   *   changes); TypeError when the cache was freed
   */
  reorder(indices: Int32Array | readonly number[]): void;
  /**
   * Copies tokens [start, end) of every sequence out (docs/spec.md 4.7), float16 caches give the stored
   * binary16 bits; float32, bfloat16, int8 and int4 caches float32 (the stored values, decoded exactly).
   * @throws RangeError unless 0 <= start <= end <= min(lengths)
   */
  read(options?: KVCacheReadOptions): KVCacheContents;
  /**
   * The cache's options, lengths and stored tokens (not its spare capacity) as bytes of the format of
   * docs/cache-format.md, ending with a CRC-32; {@link MHA.loadKVCache} makes an equal cache of them.
   */
  save(): Uint8Array;
  /** Releases the cache's memory. Calling it again does nothing; any other use then throws a TypeError. */
  free(): void;
}
