// The public types of mha-wasm: every interface the package exports, with their TSDoc. No runtime code;
// the classes that implement them are private (instance.ts, heap-tensor.ts). Shapes are row-major,
// outermost first: B batch, S query length, T key/value length, H heads, Dh = D / H head size, D model size,
// Dv the value head size (vHeadDim, default Dh).
import type { RopeTables, RopeTablesOptions } from './rope.js';
import type { AttentionState, KVCache, KVCacheOptions, LoadKVCacheOptions } from './kv-cache-types.js';
import type { MergeAttentionOptions } from './merge-attention.js';
import type { Float16Tensor, HeapTensor, RopeOptions, TensorDType, TensorIn, TensorOut } from './tensor-types.js';

/** Options of {@link createMHA}. */
export interface CreateOptions {
  /**
   * Threads for the kernel, the calling thread included: a count from 1 to 64, or `'auto'` for one per
   * core (`navigator.hardwareConcurrency`, or `os.availableParallelism()` in Node), at most 8. Default 1.
   * More than 1 loads a threaded build (a pool of Web Workers / Node worker threads on a
   * SharedArrayBuffer), which needs WebAssembly threads and SIMD and, in browsers, a cross-origin
   * isolated page (COOP/COEP headers). Where that is missing the instance runs single-threaded,
   * `info.threads` says 1 and `console.warn` says why, once per reason. Call `dispose()` to end the
   * worker pool (Node exits only once it has ended).
   */
  threads?: number | 'auto';
  /**
   * `'auto'` (default): the best build the engine runs: the Relaxed SIMD builds (`relaxed-simd`,
   * `relaxed-simd-threads`: fused multiply-add) where it has WebAssembly Relaxed SIMD (Chrome 114+,
   * Firefox 145+, Node only with `--experimental-wasm-relaxed-simd`), else the SIMD128 builds, else the
   * `baseline` build. `'fixed'`: never Relaxed SIMD (the SIMD128 builds, whose results are the same on
   * every engine). `false`: always the `baseline` build (no SIMD, single-threaded). The builds differ in
   * the last bits of their results, each within the same accuracy bound (docs/API.md, "Builds").
   */
  simd?: 'auto' | 'fixed' | false;
  /**
   * Where to fetch `mha.wasm` from, for a CDN or custom hosting: an absolute URL, a URL relative to
   * the page (`document.baseURI`), or in Node a `file:` URL or a file path. The file must be a `.wasm`
   * of this same release: `mha.wasm` (`mha-wasm/mha.wasm` in the package), `mha-baseline.wasm`,
   * `mha-threads.wasm`, `mha-relaxed.wasm` or `mha-relaxed-threads.wasm`; the file decides the build. A
   * relaxed file on an engine without Relaxed SIMD is an Error that says so. Default: the selected build's
   * file next to this script, e.g. `new URL('./mha.wasm', import.meta.url)`, which bundlers rewrite.
   */
  wasmUrl?: string | URL;
  /** The bytes of one of those `.wasm` files, when you load them yourself. Exclusive with `wasmUrl`. */
  wasmBinary?: ArrayBuffer | Uint8Array;
  /**
   * Default `true`: before resolving, run the kernel on a small problem until the engine has
   * compiled it with its optimizing tier (checked by timing; at most 250 ms). V8 first runs wasm
   * through a baseline compiler, and a long first call would otherwise run there from start to end,
   * several times slower than later calls. `false` resolves as soon as the module is instantiated.
   */
  warmup?: boolean;
}

/** What the loaded module is. */
export interface MHAInfo {
  /** Package version; the wasm file reports the same one (checked at load). */
  version: string;
  /** True when the kernel runs on WebAssembly SIMD128. */
  simd: boolean;
  /** Threads the kernel actually uses, the calling thread included (1 = single-threaded; 1 after `dispose()`). */
  threads: number;
  /**
   * The build that was loaded: `'relaxed-simd'` (mha-relaxed.wasm), `'relaxed-simd-threads'`
   * (mha-relaxed-threads.wasm), `'simd'` (mha.wasm), `'simd-threads'` (mha-threads.wasm) or `'baseline'`
   * (mha-baseline.wasm).
   */
  build: BuildName;
  /**
   * The most this instance's wasm memory may grow to, in bytes: 4294901760 (4 GiB, wasm32's limit, less the
   * one 64 KiB page Emscripten keeps back) for every build. Heap tensors and caches may sit anywhere below it.
   */
  maxMemoryBytes: number;
}

/** The five builds of the wasm module. */
export type BuildName = 'relaxed-simd' | 'relaxed-simd-threads' | 'simd' | 'simd-threads' | 'baseline';

/** Dims shared by every function: q is (batch, seqLen, dModel), heads split dModel into numHeads. */
export interface HeadShape {
  /** B, an integer >= 1. */
  batch: number;
  /** S, query rows per batch item, an integer >= 1. */
  seqLen: number;
  /** D, model size, an integer >= 1 and a multiple of numHeads. */
  dModel: number;
  /** H, an integer >= 1 that divides dModel; headDim = dModel / numHeads. */
  numHeads: number;
}

/**
 * The options that {@link MHA.attentionWeights} and {@link MHA.multiHeadAttention} share. Without the
 * options of docs/spec.md Parts 2 and 4 (numKvHeads onwards) a call is plain multi-head attention. With
 * them, a key j is visible to query row i of batch item b, whose position is p = queryOffset + i, when it
 * passes every one given: j < kvLengths[b], mask, causal (j <= p) and window (p - left <= j <= p + right).
 * The score of a visible key is scale * q.k (after rope), then softcap, then minus the ALiBi term, then
 * plus bias, in that order; sinks join the softmax.
 */
export interface AttentionBaseOptions extends HeadShape {
  /** T, key/value rows per batch item (cross-attention); defaults to seqLen. */
  kvSeqLen?: number;
  /**
   * Boolean mask (batch, seqLen, kvSeqLen), shared by all heads: nonzero / true = may attend.
   * A query row with no visible key gives NaN for that row, as PyTorch does (see `emptyRows`).
   */
  mask?: Uint8Array | boolean[];
  /**
   * Query i sees key j only when j <= queryOffset + i: upper-left aligned when seqLen != kvSeqLen and
   * queryOffset is 0, lower-right with queryOffset = kvSeqLen - seqLen. ANDed with the other visibility options.
   */
  causal?: boolean;
  /** Multiplies q.k before the softmax; any finite number. Defaults to 1 / sqrt(headDim). */
  scale?: number;
  /**
   * Hkv, the key/value heads of grouped-query attention: an integer >= 1 that divides numHeads; default
   * numHeads. k and v are then (batch, kvSeqLen, numKvHeads * headDim), and query head h reads key/value
   * head floor(h / (numHeads / numKvHeads)) in place (no copy). 1 is multi-query attention.
   */
  numKvHeads?: number;
  /**
   * The position of query row 0: row i is at position queryOffset + i, key j at position j. A non-negative
   * integer, default 0. `kvSeqLen - seqLen` aligns the last query with the last key, as a decode step over
   * a cache does. Used by `causal`, `window` and `alibiSlopes`.
   */
  queryOffset?: number;
  /**
   * Valid keys per batch item (key padding by length): `batch` integers in [0, kvSeqLen]; key j of item b
   * is hidden when j >= kvLengths[b]. Default: every key.
   */
  kvLengths?: Int32Array | readonly number[];
  /**
   * A local attention window `[left, right]`: query at position p sees keys p - left .. p + right, both
   * included. Each bound a non-negative integer or Infinity. A Mistral-style window of W keys is
   * `causal: true, window: [W - 1, 0]`. Default: unbounded.
   */
  window?: readonly [number, number];
  /** Gemma 2's logit soft-capping: each score s becomes softcap * tanh(s / softcap). A finite number > 0. */
  softcap?: number;
  /**
   * ALiBi: one slope per query head (numHeads finite numbers); the score of key j for query position p
   * becomes s - slope[h] * |p - j|, computed from positions (no (seqLen, kvSeqLen) tensor is formed).
   */
  alibiSlopes?: Float32Array | readonly number[];
  /**
   * An additive float bias of shape `biasShape` (default [batch, numHeads, seqLen, kvSeqLen]), added to
   * the scores last (PyTorch's float `attn_mask`). -Infinity hides the key, as the mask does. A
   * Float32Array, or a {@link HeapTensor} of this instance (read in place).
   */
  bias?: Float32Array | HeapTensor;
  /**
   * The shape of `bias`: [1 or batch, 1 or numHeads, seqLen, kvSeqLen]; a dimension of size 1 is
   * broadcast (read with stride 0, not copied). Only together with `bias`.
   */
  biasShape?: readonly [number, number, number, number];
  /**
   * What a row with no visible key (or only -Infinity scores) gives: `'nan'` (default, PyTorch <= 2.4)
   * or `'zero'` (PyTorch >= 2.5 SDPA), in its output and weights. A NaN score makes its row NaN either way.
   */
  emptyRows?: 'nan' | 'zero';
  /**
   * Attention sinks (docs/spec.md 4.4; gpt-oss, llama.cpp): one extra logit per query head (numHeads
   * finite float32 numbers, a Float32Array or number[]) that joins each row's softmax denominator but has no
   * value row, so a row's weights sum to less than 1. A row with no visible key then gives out 0 and
   * weights 0 whatever `emptyRows` says, and `lse` counts the sink. Wrong length or a non-finite entry:
   * RangeError.
   */
  sinks?: Float32Array | readonly number[];
  /**
   * Rotary position embedding of q and k (docs/spec.md 4.5): query row i rotates at position
   * queryOffset + i, key j at j; v is not rotated. The tables need a row for every position the call has:
   * queryOffset + seqLen <= P and kvSeqLen <= P, else a RangeError (nothing is computed). An odd rotaryDim
   * or one past headDim, or tables of different lengths or of a length that is no multiple of
   * rotaryDim / 2, are RangeErrors too; tables that are not Float32Arrays a TypeError.
   */
  rope?: RopeOptions;
}

/**
 * Options of {@link MHA.attentionWeights}: those of {@link AttentionBaseOptions} and `stage`. It has no v,
 * so `vHeadDim` (the weights do not depend on it) and `dtype` (it takes float32 q and k) are unknown
 * options there, a TypeError, as are `out` and `lse`.
 */
export interface AttentionWeightsOptions extends AttentionBaseOptions {
  /**
   * Which (batch, numHeads, seqLen, kvSeqLen) matrix to return (docs/spec.md 4.3; ONNX
   * `qk_matmul_output_mode` 0-3): `'scaled'`, scale * q.k for every (i, j), visible or not (after rope);
   * `'softcapped'`, after the softcap, every (i, j); `'biased'`, after ALiBi and bias, with -Infinity at
   * every key that kvLengths, mask, causal or window hides; `'softmax'` (default), the weights. Another
   * string is a RangeError, another type a TypeError.
   */
  stage?: 'scaled' | 'softcapped' | 'biased' | 'softmax';
}

/** Options of {@link MHA.multiHeadAttention}. */
export interface AttentionOptions extends AttentionBaseOptions {
  /**
   * Dv, the size of a value head (docs/spec.md 4.1; ONNX `v_head_size`, DeepSeek-style latent attention):
   * a positive integer, default headDim. v is then (batch, kvSeqLen, numKvHeads * vHeadDim) and out
   * (batch, seqLen, numHeads * vHeadDim); dModel still sizes q and k, and the default scale stays
   * 1 / sqrt(headDim). Heap tensors take it too.
   */
  vHeadDim?: number;
  /**
   * The element type of q, k, v and out (docs/spec.md 4.2): `'float32'` (default; Float32Array or
   * HeapTensor) or `'float16'`: each a {@link Float16Tensor} (Uint16Array of binary16 bits, or a
   * Float16Array where the engine has one). The inputs are widened exactly to float32 as they are copied
   * into the wasm heap, the math is float32, and out is rounded once to binary16 (nearest even, overflow
   * to ±Infinity, NaN stays NaN). `lse` and `bias` stay Float32Array. A HeapTensor (float32) with
   * `'float16'` is a TypeError, as is any array of the wrong kind for the dtype.
   */
  dtype?: TensorDType;
  /**
   * Preallocated output (batch, seqLen, numHeads * vHeadDim). A Float32Array is filled and returned; it
   * may alias q, k or v. A {@link HeapTensor} is written by the kernel in place (no copy) and the call
   * returns its `data` view; it must not be the same tensor as q, k or v, which the kernel reads while it
   * writes. With `dtype: 'float16'`: a Uint16Array or Float16Array, filled and returned.
   */
  out?: Float32Array | HeapTensor | Float16Tensor;
  /**
   * An output to fill with the log-sum-exp of every row, (batch, numHeads, seqLen): m + ln(sum_j exp(s_j - m))
   * over the visible keys (natural log, m the row maximum); -Infinity for an empty row. With it, attention
   * over two disjoint key sets combines exactly. A Float32Array, or a {@link HeapTensor} of this instance
   * (written in place), distinct from q, k, v, bias and out.
   */
  lse?: Float32Array | HeapTensor;
}

/** A loaded mha-wasm instance. Each has its own wasm memory; none shares state with another. */
export interface MHA {
  /** What was loaded. */
  readonly info: MHAInfo;
  /**
   * Multi-head scaled dot-product attention, the spec's `multi_head_attention(q, k, v, num_heads, mask)`:
   * per head h, `softmax(q_h k_h^T * scale) v_h`, heads merged back into dModel.
   *
   * Each of q, k, v, `options.bias`, `options.out` and `options.lse` may be a Float32Array (copied into the
   * wasm heap and out again) or a {@link HeapTensor} of this instance (used in place); q, k and v may be
   * one and the same. The options of {@link AttentionWeightsOptions} add grouped-query attention,
   * positions, key lengths, windows, softcap, ALiBi and a bias.
   *
   * @param q - (batch, seqLen, dModel)
   * @param k - (batch, kvSeqLen, numKvHeads * headDim); numKvHeads = numHeads unless given
   * @param v - (batch, kvSeqLen, numKvHeads * vHeadDim); vHeadDim = headDim unless given
   * @param options - dims, and the optional mask, causal flag, scale, the options of docs/spec.md Parts 2
   *   and 4 (vHeadDim, dtype, sinks, rope), the output buffer and the lse output
   * @returns (batch, seqLen, numHeads * vHeadDim): a Float32Array `options.out`, the `data` view of a
   *   HeapTensor `options.out` (a live heap view: a later call may detach it), else a new Float32Array;
   *   with `dtype: 'float16'` the `out` given, else a new Uint16Array (a Float16Array when q is one)
   * @throws TypeError when an argument has the wrong type (or kind for the dtype: a Float32Array or
   *   HeapTensor with 'float16', a Uint16Array without) or is missing, a HeapTensor was freed or belongs to
   *   another instance, or `out` or `lse` is the same HeapTensor as an input
   * @throws RangeError when a dim, length or option value is wrong (sinks, rope: see their options), or the
   *   buffers do not fit in wasm memory
   * @example
   * ```ts
   * const out = mha.multiHeadAttention(q, k, v, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
   * ```
   */
  multiHeadAttention<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: AttentionOptions & { dtype?: D },
  ): TensorOut<D>;
  /**
   * The RoPE tables for `rope: { cos, sin }` (docs/spec.md 4.5), the same function as the package's
   * standalone {@link ropeTables} export: angle(p, r) = (p / scale) · theta^(−2r / rotaryDim) for positions
   * [0, positions), cos and sin in float64 rounded to float32.
   *
   * @param options - rotaryDim, positions, theta (default 10000), scale (default 1)
   * @returns `{ cos, sin }`, each a Float32Array (positions, rotaryDim / 2)
   * @throws TypeError for a missing or non-number option; RangeError for an odd rotaryDim, a non-positive
   *   count, or a theta <= 1 / scale <= 0
   * @example
   * ```ts
   * const rope = { ...mha.ropeTables({ rotaryDim: 64, positions: 4096, theta: 500000 }) };
   * ```
   */
  ropeTables(options: RopeTablesOptions): RopeTables;
  /**
   * A float32 tensor of `length` elements on this instance's wasm heap (16-byte aligned, contents
   * unspecified until written). Pass it to {@link MHA.multiHeadAttention} as q, k, v or `out` to skip
   * the copies into and out of the heap; fill it with `set()` or through `data`.
   *
   * @param length - number of float32 elements, an integer >= 1
   * @returns a {@link HeapTensor}; free it with `free()`, or all at once with {@link MHA.dispose}
   * @throws TypeError when `length` is not a number
   * @throws RangeError when `length` is not a positive integer, or the wasm memory cannot hold it
   * @example
   * ```ts
   * const x = mha.allocate(2 * 5 * 12);
   * x.set(input);
   * const y = mha.allocate(x.length);
   * mha.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3, out: y });
   * console.log(y.data[0]);
   * ```
   */
  allocate(length: number): HeapTensor;
  /**
   * A KV cache on this instance's heap, for token-by-token decoding (docs/spec.md Part 3).
   *
   * @param options - batch, numKvHeads, headDim, capacity, dtype (default 'float32') and vHeadDim (default headDim)
   * @returns an empty {@link KVCache}
   * @throws TypeError / RangeError for a bad option; RangeError, with the bytes it would need, when
   *   capacity x dims do not fit the 4 GiB wasm heap (and what it can still have); RangeError naming the
   *   core's refusal for a vHeadDim other than headDim while this build's kernels do not compute it
   * @example
   * ```ts
   * const cache = mha.createKVCache({ batch: 1, numKvHeads: 8, headDim: 128, capacity: 4096, dtype: 'float16' });
   * ```
   */
  createKVCache(options: KVCacheOptions): KVCache;
  /**
   * A new cache equal to the one that {@link KVCache.save} wrote these bytes of (docs/spec.md 4.7,
   * docs/cache-format.md): its options, lengths and tokens. The bytes are untrusted: everything is
   * checked before anything is allocated.
   *
   * @param bytes - a Uint8Array view (a subarray, a Node Buffer) holding exactly what save() returned
   * @param options - capacity (default: the saved cache's)
   * @throws TypeError for a non-Uint8Array; RangeError, saying what is wrong, for bytes that are not
   *   exactly a save (header, version, dims, lengths, size, checksum) or a capacity below the longest
   *   saved sequence. Nothing outlives the failed call.
   */
  loadKVCache(bytes: Uint8Array, options?: LoadKVCacheOptions): KVCache;
  /**
   * Merges attention states computed over disjoint key sets of the same queries (docs/spec.md 5.3,
   * FlashInfer's merge_state) into the state of the attention over their union: lse = ln Σ_p exp(lse_p),
   * out = Σ_p exp(lse_p − lse) · out_p, in float64, rounded once to float32. A row empty in every part
   * (lse −∞) gives out 0 and lse −∞. This is how keys split across caches, calls or Workers combine.
   *
   * @param parts - `{ out, lse }` states (from {@link KVCache.attend} with `lse`, or multiHeadAttention's
   *   out and lse): out (batch, seqLen, numHeads·Dv), lse (batch, numHeads, seqLen); Float32Arrays or
   *   HeapTensors of this instance; Dv from the first out's length
   * @returns a new state: out (batch, seqLen, numHeads·Dv) and lse (batch, numHeads, seqLen)
   * @throws TypeError when parts is not a non-empty array of { out, lse } or a tensor has the wrong type;
   *   RangeError when a length does not match the shape or the first part's Dv
   */
  mergeAttention(
    parts: readonly AttentionState<Float32Array | HeapTensor>[],
    options: MergeAttentionOptions,
  ): AttentionState;
  /**
   * The spec's `_split_heads`: (batch, seqLen, dModel) -> (batch, numHeads, seqLen, headDim).
   *
   * @param x - Float32Array (batch, seqLen, dModel)
   * @param shape - dims of x and the head count
   * @returns a new Float32Array (batch, numHeads, seqLen, headDim)
   * @throws TypeError / RangeError as {@link MHA.multiHeadAttention}
   * @example
   * ```ts
   * const xh = mha.splitHeads(x, { batch: 1, seqLen: 4, dModel: 8, numHeads: 2 });
   * ```
   */
  splitHeads(x: Float32Array, shape: HeadShape): Float32Array;
  /**
   * Inverse of {@link MHA.splitHeads}: (batch, numHeads, seqLen, headDim) -> (batch, seqLen, dModel),
   * bit-exactly.
   *
   * @param xh - Float32Array (batch, numHeads, seqLen, headDim)
   * @param shape - dims of the merged tensor and the head count
   * @returns a new Float32Array (batch, seqLen, dModel)
   * @throws TypeError / RangeError as {@link MHA.multiHeadAttention}
   * @example
   * ```ts
   * const x2 = mha.mergeHeads(mha.splitHeads(x, shape), shape); // equals x
   * ```
   */
  mergeHeads(xh: Float32Array, shape: HeadShape): Float32Array;
  /**
   * The softmax attention probabilities of every head, (batch, numHeads, seqLen, kvSeqLen). Computed
   * by the double-precision reference; meant for inspection and visualization, it materializes
   * B*H*S*T floats.
   *
   * @param q - Float32Array (batch, seqLen, dModel)
   * @param k - Float32Array (batch, kvSeqLen, numKvHeads * headDim)
   * @param options - dims, and the optional mask, causal flag, scale, the options of docs/spec.md Part 2,
   *   sinks, rope and `stage` (every option of multiHeadAttention but `out`, `lse`, `vHeadDim` and `dtype`,
   *   which are refused: TypeError)
   * @returns a new Float32Array (batch, numHeads, seqLen, kvSeqLen): the weights (hidden keys weigh 0,
   *   empty rows are NaN, or 0 with `emptyRows: 'zero'` or with sinks), or the scores of `stage`
   * @throws TypeError / RangeError as {@link MHA.multiHeadAttention}
   * @example
   * ```ts
   * const w = mha.attentionWeights(q, k, { batch: 1, seqLen: 3, dModel: 4, numHeads: 2, causal: true });
   * ```
   */
  attentionWeights(q: Float32Array, k: Float32Array, options: AttentionWeightsOptions): Float32Array;
  /**
   * Memory of this instance's wasm heap: `wasmMemoryBytes` is the size of its WebAssembly.Memory
   * (it only grows), `heapBytesInUse` what malloc has handed out (live heap tensors, and staging
   * buffers and scratch, reused across calls). Both stay flat over repeated calls of the same shapes.
   */
  memoryStats(): { wasmMemoryBytes: number; heapBytesInUse: number };
  /**
   * Frees this instance's staging buffers and scratch memory, frees every {@link HeapTensor} it
   * allocated (using one afterwards throws a TypeError) and every {@link KVCache} (a TypeError
   * afterwards), and ends its worker pool (threaded build: the workers are terminated, so Node can exit).
   * The instance stays usable: later calls allocate again and run on the calling thread. The
   * WebAssembly.Memory itself cannot shrink; drop the instance to release it.
   */
  dispose(): void;
}
