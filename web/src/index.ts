/**
 * mha-wasm: exact, fast multi-head attention for the web.
 *
 * A thin layer over the WebAssembly module built from `src/` (C++17 + xsimd, SIMD128). It validates
 * arguments, copies inputs into the wasm heap, calls the kernel and copies the result out; tensors that
 * live on the heap ({@link MHA.allocate}) are passed by address instead, with no copy. Three builds
 * of the same core ship (`simd`, `simd-threads`, `baseline`); {@link createMHA} picks one per instance. Shapes are
 * row-major, outermost first, with these letters: B batch, S query length, T key/value length,
 * H heads, Dh = D / H head size, D model size.
 *
 * @packageDocumentation
 */
import createMhaModule from './mha.js';
import type { MhaModuleFactory, MhaModuleOptions, MhaWasmModule } from './mha.js';
import { VERSION } from './version.js';

/** Options of {@link createMHA}. */
export interface CreateOptions {
  /**
   * Threads for the kernel, the calling thread included: a count from 1 to 64, or `'auto'` for one per
   * core (`navigator.hardwareConcurrency`, or `os.availableParallelism()` in Node), at most 8. Default 1.
   * More than 1 loads the `simd-threads` build (a pool of Web Workers / Node worker threads on a
   * SharedArrayBuffer), which needs WebAssembly threads and SIMD and, in browsers, a cross-origin
   * isolated page (COOP/COEP headers). Where that is missing the instance runs single-threaded,
   * `info.threads` says 1 and `console.warn` says why, once per reason. Call `dispose()` to end the
   * worker pool (Node exits only once it has ended).
   */
  threads?: number | 'auto';
  /**
   * `'auto'` (default): the SIMD builds where the engine supports WebAssembly SIMD128, else the
   * `baseline` build. `false`: always the `baseline` build (no SIMD, single-threaded).
   */
  simd?: 'auto' | false;
  /**
   * Where to fetch `mha.wasm` from, for a CDN or custom hosting: an absolute URL, a URL relative to
   * the page (`document.baseURI`), or in Node a `file:` URL or a file path. The file must be a `.wasm`
   * of this same release: `mha.wasm` (`mha-wasm/mha.wasm` in the package), `mha-baseline.wasm` or
   * `mha-threads.wasm`; the file decides the build. Default: the selected build's file next to this
   * script, e.g. `new URL('./mha.wasm', import.meta.url)`, which bundlers rewrite.
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
  /** The build that was loaded: `'simd'` (mha.wasm), `'simd-threads'` (mha-threads.wasm) or `'baseline'` (mha-baseline.wasm). */
  build: BuildName;
}

/** The three builds of the wasm module. */
export type BuildName = 'simd' | 'simd-threads' | 'baseline';

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

/** Options of {@link MHA.attentionWeights}. */
export interface AttentionWeightsOptions extends HeadShape {
  /** T, key/value rows per batch item (cross-attention); defaults to seqLen. */
  kvSeqLen?: number;
  /**
   * Boolean mask (batch, seqLen, kvSeqLen), shared by all heads: nonzero / true = may attend.
   * A query row with no visible key gives NaN for that row, as PyTorch does.
   */
  mask?: Uint8Array | boolean[];
  /** Query i sees key j only when j <= i (upper-left aligned when seqLen != kvSeqLen). ANDed with mask. */
  causal?: boolean;
  /** Multiplies q.k before the softmax; any finite number. Defaults to 1 / sqrt(headDim). */
  scale?: number;
}

/** Options of {@link MHA.multiHeadAttention}. */
export interface AttentionOptions extends AttentionWeightsOptions {
  /**
   * Preallocated output (batch, seqLen, dModel). A Float32Array is filled and returned; it may alias
   * q, k or v. A {@link HeapTensor} is written by the kernel in place (no copy) and the call returns
   * its `data` view; it must not be the same tensor as q, k or v, which the kernel reads while it writes.
   */
  out?: Float32Array | HeapTensor;
}

/**
 * A float32 buffer on an instance's wasm heap, from {@link MHA.allocate}. {@link MHA.multiHeadAttention}
 * takes it for q, k, v and `out` by address: no copy in or out. It belongs to the instance that made
 * it, stays allocated until {@link HeapTensor.free} or {@link MHA.dispose}, and is not garbage-collected.
 */
export interface HeapTensor {
  /** Number of float32 elements. */
  readonly length: number;
  /**
   * A live Float32Array view of the tensor's memory: reads see what the kernel wrote, writes are what
   * it will read. Any later call of the instance may grow its wasm memory, which detaches this view
   * (threaded build: the view stays on the old, shorter buffer). Re-read `data` after each call
   * instead of keeping the view; each read returns a view of the current memory.
   *
   * @throws TypeError once the tensor is freed
   */
  readonly data: Float32Array;
  /**
   * Copies `source` into the tensor, starting at element `offset`.
   *
   * @param source - Float32Array of at most `length - offset` elements
   * @param offset - first element to write, an integer in [0, length]; default 0
   * @throws TypeError when the tensor is freed or `source` is not a Float32Array
   * @throws RangeError when `offset` is not an integer in [0, length] or `source` does not fit
   */
  set(source: Float32Array, offset?: number): void;
  /**
   * A copy of the tensor's elements in a new Float32Array, independent of the wasm memory.
   *
   * @throws TypeError once the tensor is freed
   */
  toArray(): Float32Array;
  /** Returns the memory to the instance's heap. Calling it again does nothing; any other use then throws a TypeError. */
  free(): void;
}

/** A loaded mha-wasm instance. Each has its own wasm memory; none shares state with another. */
export interface MHA {
  /** What was loaded. */
  readonly info: MHAInfo;
  /**
   * Multi-head scaled dot-product attention, the spec's `multi_head_attention(q, k, v, num_heads, mask)`:
   * per head h, `softmax(q_h k_h^T * scale) v_h`, heads merged back into dModel.
   *
   * Each of q, k, v and `options.out` may be a Float32Array (copied into the wasm heap and out again) or
   * a {@link HeapTensor} of this instance (used in place); q, k and v may be one and the same.
   *
   * @param q - (batch, seqLen, dModel)
   * @param k - (batch, kvSeqLen, dModel)
   * @param v - (batch, kvSeqLen, dModel)
   * @param options - dims, and the optional mask, causal flag, scale and output buffer
   * @returns Float32Array (batch, seqLen, dModel): a Float32Array `options.out`, the `data` view of a
   *   HeapTensor `options.out` (a live heap view: a later call may detach it), else a new array
   * @throws TypeError when an argument has the wrong type or is missing, a HeapTensor was freed or
   *   belongs to another instance, or `out` is the same HeapTensor as q, k or v
   * @throws RangeError when a dim or length is wrong, or the buffers do not fit in wasm memory
   * @example
   * ```ts
   * const out = mha.multiHeadAttention(q, k, v, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
   * ```
   */
  multiHeadAttention(q: Float32Array | HeapTensor, k: Float32Array | HeapTensor, v: Float32Array | HeapTensor,
    options: AttentionOptions): Float32Array;
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
   * @param k - Float32Array (batch, kvSeqLen, dModel)
   * @param options - dims, and the optional mask, causal flag and scale
   * @returns a new Float32Array (batch, numHeads, seqLen, kvSeqLen); fully hidden rows are NaN
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
   * allocated (using one afterwards throws a TypeError), and ends its worker pool (threaded build:
   * the workers are terminated, so Node can exit). The instance stays usable: later calls allocate
   * again and run on the calling thread. The WebAssembly.Memory itself cannot shrink; drop the
   * instance to release it.
   */
  dispose(): void;
}

// ---------------------------------------------------------------------------------------------
// Errors. Messages name the parameter, say what was expected and what was given.

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Tensor.is(value)) return Tensor.describe(value);
  if (Array.isArray(value)) return `Array(${value.length})`;
  if (ArrayBuffer.isView(value)) {
    return `${value.constructor.name}(${(value as unknown as { length?: number }).length ?? value.byteLength})`;
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}

function checkOptionsObject(name: string, options: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`${name}: expected an options object, got ${describe(options)}`);
  }
  // for...in over own keys: Object.entries would allocate an array per key on every call (small calls
  // are dominated by such fixed costs).
  for (const key in options) {
    if (!Object.prototype.hasOwnProperty.call(options, key)) continue;
    // A key spelled wrong is a bug worth an error; a key explicitly set to undefined is not.
    if (!allowed.includes(key) && (options as Record<string, unknown>)[key] !== undefined) {
      throw new TypeError(`${name}: unknown option "${key}" (expected one of ${allowed.join(', ')})`);
    }
  }
  return options as Record<string, unknown>;
}

function checkDim(name: string, value: unknown): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name}: expected a positive integer, got ${describe(value)}`);
  }
  if (!Number.isInteger(value) || value < 1 || value > 0x7fffffff) {
    throw new RangeError(`${name}: expected a positive integer below 2^31, got ${describe(value)}`);
  }
  return value;
}

/**
 * True when the view's ArrayBuffer was detached (transferred to a worker, `ArrayBuffer.transfer`, or a
 * wasm memory that grew): such a view reads as length 0. `buffer.detached` where the engine has it
 * (Node 22+, recent browsers); elsewhere an empty view is probed by viewing its buffer, which throws
 * only when detached. Shared buffers cannot be detached.
 */
function isDetached(view: ArrayBufferView): boolean {
  const buffer = view.buffer as ArrayBuffer & { detached?: boolean };
  if (typeof buffer.detached === 'boolean') return buffer.detached;
  if (view.byteLength !== 0) return false;
  try {
    new Uint8Array(buffer);
    return false;
  } catch {
    return true;
  }
}

function checkNotDetached(name: string, value: ArrayBufferView): void {
  if (isDetached(value)) {
    throw new TypeError(`${name}: the ${value.constructor.name}'s ArrayBuffer is detached (transferred or released); pass an array whose buffer is live`);
  }
}

/**
 * `formula()` explains the expected length; it is only built for an error message. `alternative` names
 * what else the parameter accepts, for the type error.
 */
function checkFloat32(name: string, value: unknown, expected: number, formula: () => string, alternative = ''): Float32Array {
  if (!(value instanceof Float32Array)) {
    const hint = alternative === '' && Tensor.is(value) ? ' (only multiHeadAttention takes a HeapTensor; pass its data)' : '';
    throw new TypeError(`${name}: expected Float32Array of length ${expected} (${formula()})${alternative}, got ${describe(value)}${hint}`);
  }
  if (!ArrayBuffer.isView(value)) {
    // e.g. a Proxy: its reads would run user code while the call stages data in the wasm heap.
    throw new TypeError(`${name}: expected a Float32Array, got an object that only inherits from Float32Array (e.g. a Proxy)`);
  }
  checkNotDetached(name, value);
  if (value.length !== expected) {
    throw new RangeError(`${name}: expected Float32Array of length ${expected} (${formula()}), got length ${value.length}`);
  }
  return value;
}

/** Largest element count of any one tensor: flat indices stay within int32, as in the C++ core. */
const MAX_ELEMENTS = 2 ** 31;

interface Dims {
  batch: number;
  seqLen: number;
  kvSeqLen: number;
  dModel: number;
  numHeads: number;
  headDim: number;
}

function checkDims(fn: string, o: Record<string, unknown>, withKv: boolean): Dims {
  const batch = checkDim(`${fn}: batch`, o.batch);
  const seqLen = checkDim(`${fn}: seqLen`, o.seqLen);
  const dModel = checkDim(`${fn}: dModel`, o.dModel);
  const numHeads = checkDim(`${fn}: numHeads`, o.numHeads);
  const kvSeqLen = withKv && o.kvSeqLen !== undefined ? checkDim(`${fn}: kvSeqLen`, o.kvSeqLen) : seqLen;
  if (dModel % numHeads !== 0) {
    throw new RangeError(
      `${fn}: dModel: expected a multiple of numHeads (${numHeads}), got ${dModel} (${dModel} % ${numHeads} = ${dModel % numHeads})`,
    );
  }
  // Only q, k, v and out here: the kernel never forms an (S, T) tensor, so seqLen*kvSeqLen may pass 2^31;
  // a mask (checkMask) or attention weights (attentionWeights) have their own limit.
  for (const [what, count] of [
    ['batch*seqLen*dModel', batch * seqLen * dModel],
    ['batch*kvSeqLen*dModel', batch * kvSeqLen * dModel],
  ] as const) {
    if (count >= MAX_ELEMENTS) {
      throw new RangeError(`${fn}: shape too large: ${what} = ${count} elements, expected fewer than 2^31`);
    }
  }
  return { batch, seqLen, kvSeqLen, dModel, numHeads, headDim: dModel / numHeads };
}

function checkScale(fn: string, value: unknown, headDim: number): number {
  if (value === undefined) return Math.fround(1 / Math.sqrt(headDim));
  if (typeof value !== 'number') throw new TypeError(`${fn}: scale: expected a finite number, got ${describe(value)}`);
  if (!Number.isFinite(value)) throw new RangeError(`${fn}: scale: expected a finite number, got ${value}`);
  return value;
}

function checkCausal(fn: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new TypeError(`${fn}: causal: expected a boolean, got ${describe(value)}`);
  return value;
}

/** The mask as bytes to stage (a boolean[] is converted here), or undefined without a mask. */
function checkMask(fn: string, value: unknown, d: Dims): Uint8Array | undefined {
  if (value === undefined || value === null) return undefined;
  const expected = d.batch * d.seqLen * d.kvSeqLen;
  const formula = `batch*seqLen*kvSeqLen = ${d.batch}*${d.seqLen}*${d.kvSeqLen}`;
  if (expected >= MAX_ELEMENTS) {
    throw new RangeError(`${fn}: shape too large for a mask: ${formula} = ${expected} elements, expected fewer than 2^31 ` +
      '(without a mask, or with causal: true, there is no such limit)');
  }
  if (!(value instanceof Uint8Array) && !Array.isArray(value)) {
    throw new TypeError(`${fn}: mask: expected Uint8Array or boolean[] of length ${expected} (${formula}), got ${describe(value)}`);
  }
  if (value instanceof Uint8Array && !ArrayBuffer.isView(value)) {
    throw new TypeError(`${fn}: mask: expected a Uint8Array, got an object that only inherits from Uint8Array (e.g. a Proxy)`);
  }
  if (value instanceof Uint8Array) checkNotDetached(`${fn}: mask`, value);
  if (value.length !== expected) {
    throw new RangeError(`${fn}: mask: expected length ${expected} (${formula}), got length ${value.length}`);
  }
  if (Array.isArray(value)) {
    // Each entry is read once, here: the bytes are what gets staged, so no getter runs during the call.
    const bytes = new Uint8Array(expected);
    for (let i = 0; i < expected; i++) {
      const entry: unknown = value[i];
      if (typeof entry !== 'boolean') {
        throw new TypeError(`${fn}: mask: expected boolean[] entries, got ${describe(entry)} at index ${i}`);
      }
      bytes[i] = entry ? 1 : 0;
    }
    return bytes;
  }
  return value;
}

// Status codes of src/mha/shape.hpp. JS validation runs first, so these only surface if the two
// layers ever disagree; the message still says what the core refused.
const STATUS_MESSAGES: Record<number, string> = {
  1: 'a dimension is not positive',
  2: 'dModel is not divisible by numHeads',
  3: 'a tensor is too large for 32-bit indexing',
  4: 'a buffer is missing',
  5: 'scale is not finite',
  6: 'out of wasm memory for the kernel scratch',
};

function checkStatus(fn: string, status: number): void {
  if (status === 0) return;
  const message = STATUS_MESSAGES[status] ?? `unknown status ${status}`;
  throw new RangeError(`${fn}: the wasm core rejected the call: ${message}`);
}

// ---------------------------------------------------------------------------------------------
// Loading. A WebAssembly.Module is fetched and compiled once per source (memoized: the default URL,
// each custom wasmUrl, each wasmBinary object); every createMHA() call instantiates it afresh, so
// instances share no state.

/** Where the wasm comes from: a URL to fetch, a file path (Node), or bytes given by the caller. */
type WasmSource =
  | { kind: 'url'; url: URL; label: string }
  | { kind: 'path'; path: string; label: string }
  | { kind: 'bytes'; bytes: ArrayBuffer | Uint8Array; label: string };

const compiledByKey = new Map<string, Promise<WebAssembly.Module>>();
const compiledByBinary = new WeakMap<object, Promise<WebAssembly.Module>>();

const WASM_MAGIC = [0x00, 0x61, 0x73, 0x6d];
/** What every load error says was expected. */
const EXPECTED = `expected the WebAssembly file mha.wasm of mha-wasm ${VERSION}`;

function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string' && typeof (globalThis as { window?: unknown }).window === 'undefined';
}

function defaultSource(build: BuildName = 'simd'): WasmSource {
  // Keep these expressions literal: Vite, webpack 5 and Parcel recognize `new URL('<file>', import.meta.url)`
  // and emit the file as an asset with a rewritten URL.
  const url = build === 'simd-threads'
    ? new URL('./mha-threads.wasm', import.meta.url)
    : build === 'baseline'
      ? new URL('./mha-baseline.wasm', import.meta.url)
      : new URL('./mha.wasm', import.meta.url);
  return { kind: 'url', url, label: url.href };
}

// ---------------------------------------------------------------------------------------------
// Build selection: feature probes, thread counts, and the warning when threads cannot be used.

/** A module with one function using a v128 op (i8x16.splat + i8x16.popcnt): valid only with SIMD128. */
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65,
  0, 253, 15, 253, 98, 11]);
/** A module with a shared memory and an atomic load: valid only with WebAssembly threads. */
const THREADS_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 5, 4, 1, 3, 1, 1, 10,
  11, 1, 9, 0, 65, 0, 254, 16, 2, 0, 26, 11]);

function validates(bytes: Uint8Array): boolean {
  try {
    return WebAssembly.validate(bytes as Uint8Array<ArrayBuffer>);
  } catch {
    return false;
  }
}

/** Largest explicit thread count, and the cap of `threads: 'auto'`. */
const MAX_THREADS = 64;
const MAX_AUTO_THREADS = 8;

async function coreCount(): Promise<number> {
  const nav = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator;
  if (isNode()) {
    try {
      const osModule = 'node:os';
      const os = (await import(/* webpackIgnore: true */ /* @vite-ignore */ osModule)) as {
        availableParallelism?: () => number;
        cpus(): unknown[];
      };
      return os.availableParallelism?.() ?? os.cpus().length;
    } catch {
      // fall through to navigator (Node 21+ has it too)
    }
  }
  const n = nav?.hardwareConcurrency;
  return typeof n === 'number' && n >= 1 ? Math.floor(n) : 1;
}

/** Why the threaded build cannot run here, or undefined when it can. */
function threadsUnavailable(): string | undefined {
  const g = globalThis as { crossOriginIsolated?: boolean; SharedArrayBuffer?: unknown; Worker?: unknown };
  if (!isNode() && g.crossOriginIsolated === false) {
    return 'the page is not cross-origin isolated (crossOriginIsolated is false): serve it with the headers ' +
      'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp (missing COOP/COEP headers)';
  }
  if (typeof g.SharedArrayBuffer !== 'function') return 'SharedArrayBuffer is not available in this environment';
  if (!isNode() && typeof g.Worker !== 'function') return 'Web Workers are not available in this environment';
  if (!validates(THREADS_PROBE)) return 'this engine does not support WebAssembly threads (shared memory and atomics)';
  return undefined;
}

const warned = new Set<string>();

/** Says once per reason (per page or process) that threads were asked for and why they are not used. */
function warnSingleThreaded(requested: number, reason: string): void {
  if (warned.has(reason)) return;
  warned.add(reason);
  console.warn(`mha-wasm: ${requested} threads requested, running single-threaded: ${reason}`);
}

/**
 * The threaded glue: an ES module in browsers, CommonJS in Node (see CMakeLists.txt), with where its
 * pthread worker script and the glue itself (which each worker loads) are.
 */
async function threadsGlue(): Promise<{ factory: MhaModuleFactory; workerFile: string; glueFile: string }> {
  if (isNode()) {
    // Hidden from bundlers: this branch only ever runs in Node.
    const moduleName = 'node:module';
    const urlName = 'node:url';
    const { createRequire } = (await import(/* webpackIgnore: true */ /* @vite-ignore */ moduleName)) as {
      createRequire(from: string | URL): (id: string) => unknown;
    };
    const { fileURLToPath } = (await import(/* webpackIgnore: true */ /* @vite-ignore */ urlName)) as {
      fileURLToPath(url: string | URL): string;
    };
    // Computed names and a base in a variable: bundlers must not try to follow these.
    const here = import.meta.url;
    const glue = ['.', 'mha-threads.node.cjs'].join('/');
    const worker = ['.', 'mha-threads.node.worker.cjs'].join('/');
    const factory = createRequire(here)(glue) as MhaModuleFactory;
    return {
      factory,
      workerFile: fileURLToPath(new URL(worker, here)),
      glueFile: fileURLToPath(new URL(glue, here)),
    };
  }
  // Both files are assets (bundlers copy them, as they do the .wasm): the glue is imported by URL here and
  // by every worker, so it is one module, not a bundled chunk plus a copy.
  const glueUrl = new URL('./mha-threads.js', import.meta.url);
  const workerUrl = new URL('./mha-threads.worker.js', import.meta.url);
  const glue = (await import(/* webpackIgnore: true */ /* @vite-ignore */ glueUrl.href)) as { default: MhaModuleFactory };
  return { factory: glue.default, workerFile: await workerScriptUrl(workerUrl), glueFile: glueUrl.href };
}

const workerScriptUrls = new Map<string, Promise<string>>();

/**
 * The URL the pthread workers start from. The worker is a classic script that import()s the glue by URL,
 * and two bundler behaviours break the plain asset URL (both found by tests/consumers/vite-dev.test.mjs):
 * - `vite build` inlines assets under build.assetsInlineLimit (4 KiB; the worker is ~3 KB) as a data: URL.
 *   A worker started from a data: URL has an opaque origin, so its import() of the glue fails (CORS). A
 *   blob: URL of the same script has the page's origin (one per data: URL, kept: the pool may grow later).
 * - Vite's dev server runs every .js it serves through its import analysis, which rewrites the worker's
 *   import(url) and prepends an `import` statement: a SyntaxError in a classic worker. With Vite's
 *   classic-worker marker in the query (`worker_file&type=classic`, what Vite itself appends to
 *   `new Worker(new URL(...))` in dev) it inlines that helper instead. Other servers ignore the query.
 */
function workerScriptUrl(url: URL): Promise<string> {
  if (url.protocol === 'data:') {
    let blobUrl = workerScriptUrls.get(url.href);
    if (!blobUrl) {
      blobUrl = fetch(url)
        .then((response) => response.blob())
        .then((blob) => URL.createObjectURL(new Blob([blob], { type: 'text/javascript' })));
      workerScriptUrls.set(url.href, blobUrl);
    }
    return blobUrl;
  }
  if (url.protocol === 'http:' || url.protocol === 'https:') {
    const marked = new URL(url);
    // Set as a string: URLSearchParams would write worker_file=, which Vite does not recognize.
    marked.search = `${url.search ? `${url.search}&` : '?'}worker_file&type=classic`;
    return Promise.resolve(marked.href);
  }
  return Promise.resolve(url.href);
}

function sourceFromOptions(o: Record<string, unknown>): WasmSource {
  if (o.wasmUrl !== undefined && o.wasmBinary !== undefined) {
    throw new TypeError('createMHA: expected at most one of wasmUrl and wasmBinary, got both');
  }
  if (o.wasmBinary !== undefined) {
    const b = o.wasmBinary;
    if (!(b instanceof ArrayBuffer) && !(b instanceof Uint8Array)) {
      throw new TypeError(`createMHA: wasmBinary: expected an ArrayBuffer or Uint8Array holding mha.wasm, got ${describe(b)}`);
    }
    return { kind: 'bytes', bytes: b, label: `wasmBinary (${b.byteLength} bytes)` };
  }
  if (o.wasmUrl === undefined) return defaultSource();
  const u = o.wasmUrl;
  if (u instanceof URL) return { kind: 'url', url: u, label: u.href };
  if (typeof u !== 'string') {
    throw new TypeError(`createMHA: wasmUrl: expected a string or URL, got ${describe(u)}`);
  }
  if (u === '') throw new RangeError('createMHA: wasmUrl: expected a URL or path, got an empty string');
  if (isNode()) {
    // In Node a string is a URL when it has a scheme (http:, file:, data:), else a file path
    // (a Windows drive letter such as C: is a path too).
    const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]+):/.exec(u);
    if (scheme && scheme[1]!.length > 1) return { kind: 'url', url: new URL(u), label: u };
    return { kind: 'path', path: u, label: u };
  }
  const base = (globalThis as { document?: { baseURI?: string } }).document?.baseURI
    ?? (globalThis as { location?: { href?: string } }).location?.href;
  let url: URL;
  try {
    url = new URL(u, base);
  } catch {
    throw new RangeError(`createMHA: wasmUrl: expected an absolute URL or one relative to the page, got ${describe(u)}`);
  }
  return { kind: 'url', url, label: url.href };
}

async function readFileNode(path: string | URL): Promise<Uint8Array<ArrayBuffer>> {
  // Hidden from bundlers: this branch only ever runs in Node.
  const fsModule = 'node:fs/promises';
  const fs = (await import(/* webpackIgnore: true */ /* @vite-ignore */ fsModule)) as {
    readFile(path: string | URL): Promise<Uint8Array<ArrayBuffer>>;
  };
  const data = await fs.readFile(path);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** Returns the bytes and, for HTTP, the response's content type (to explain a wrong file). */
async function readWasmBytes(source: WasmSource): Promise<{ bytes: Uint8Array; contentType?: string }> {
  if (source.kind === 'bytes') {
    const b = source.bytes;
    return { bytes: b instanceof Uint8Array ? b : new Uint8Array(b) };
  }
  if (source.kind === 'path' || (source.url.protocol === 'file:' && isNode())) {
    const where = source.kind === 'path' ? source.path : source.url;
    try {
      return { bytes: await readFileNode(where) };
    } catch (error) {
      throw new Error(`mha-wasm: reading ${source.label} failed (${errorText(error)}); ${EXPECTED}`, { cause: error });
    }
  }
  let response: Response;
  try {
    response = await fetch(source.url);
  } catch (error) {
    throw new Error(`mha-wasm: fetching ${source.label} failed (${errorText(error)}); ${EXPECTED}`, { cause: error });
  }
  if (!response.ok) {
    throw new Error(
      `mha-wasm: fetching ${source.label} failed: HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}; ` +
        `${EXPECTED} there (host it, or pass createMHA({ wasmUrl }) / ({ wasmBinary }))`,
    );
  }
  const contentType = response.headers.get('content-type') ?? undefined;
  return { bytes: new Uint8Array(await response.arrayBuffer()), ...(contentType ? { contentType } : {}) };
}

function errorText(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    const text = typeof code === 'string' && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
    // Node's fetch says only "fetch failed"; the reason (ECONNREFUSED, ENOTFOUND, ...) is its cause.
    return error.cause !== undefined && error.cause !== null ? `${text}: ${errorText(error.cause)}` : text;
  }
  return String(error);
}

/** Throws a precise Error unless `bytes` start with the wasm magic number. */
function checkMagic(label: string, bytes: Uint8Array, contentType: string | undefined): void {
  if (bytes.length >= 4 && WASM_MAGIC.every((b, i) => bytes[i] === b)) return;
  const head = Array.from(bytes.subarray(0, 4), (b) => b.toString(16).padStart(2, '0')).join(' ');
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(0, 64)).trimStart().toLowerCase();
  const looksHtml = text.startsWith('<!doctype html') || text.startsWith('<html') || text.startsWith('<') ||
    (contentType ?? '').includes('html');
  const what = bytes.length === 0
    ? 'an empty file'
    : `${bytes.length} bytes starting ${head}${looksHtml ? ', an HTML page (a dev server or CDN fallback page instead of the file?)' : ''}`;
  throw new Error(
    `mha-wasm: ${label} is not a WebAssembly file: ${EXPECTED} (magic bytes 00 61 73 6d), got ${what}` +
      `${contentType ? ` served as ${contentType}` : ''}`,
  );
}

async function compileModule(source: WasmSource): Promise<WebAssembly.Module> {
  const { bytes, contentType } = await readWasmBytes(source);
  checkMagic(source.label, bytes, contentType);
  try {
    return await WebAssembly.compile(bytes as Uint8Array<ArrayBuffer>);
  } catch (error) {
    throw new Error(`mha-wasm: ${source.label} does not compile as WebAssembly (${errorText(error)}); ${EXPECTED}`, {
      cause: error,
    });
  }
}

function compiled(source: WasmSource): Promise<WebAssembly.Module> {
  const forget = (): void => {
    // Let a later call retry (e.g. after a network error).
    if (source.kind === 'bytes') compiledByBinary.delete(source.bytes);
    else compiledByKey.delete(key);
  };
  const key = source.kind === 'url' ? `url:${source.url.href}` : source.kind === 'path' ? `path:${source.path}` : '';
  const cached = source.kind === 'bytes' ? compiledByBinary.get(source.bytes) : compiledByKey.get(key);
  if (cached) return cached;
  const promise = compileModule(source).catch((error: unknown) => {
    forget();
    throw error;
  });
  if (source.kind === 'bytes') compiledByBinary.set(source.bytes, promise);
  else compiledByKey.set(key, promise);
  return promise;
}

/** Exports the glue and the TS layer need; a module without them is not this release's mha.wasm. */
const REQUIRED_API = ['version', 'simd', '_mha_attention', '_mha_attention_weights', '_mha_split_heads', '_mha_merge_heads',
  'heapBytesInUse', 'releaseScratch', '_malloc', '_free'] as const;

/** Compiles (memoized) and checks that the module is one of the builds; returns which kind it is. */
async function compiledBuild(source: WasmSource): Promise<{ wasmModule: WebAssembly.Module; threaded: boolean }> {
  const wasmModule = await compiled(source);
  // The threaded build imports its (shared) memory; the others export theirs.
  const threaded = WebAssembly.Module.imports(wasmModule).some((i) => i.kind === 'memory');
  return { wasmModule, threaded };
}

/** Raised when the threaded build's workers fail or do not all start in time; createMHA then falls back. */
class ThreadsStartFailure extends Error {}

/**
 * How long the threaded build may take to start its workers. Each must load the glue and compile the
 * module; that takes well under a second here, but a worker that fails to load would leave
 * Emscripten's start-up promise pending forever, so a bound turns a hang into a fallback.
 */
const THREADS_START_TIMEOUT_MS = 20000;

/**
 * Emscripten 3.1.6's handler of a worker's error event logs it and then rethrows the event: an uncaught
 * exception, which in Node ends the process (a worker file missing from a bundle was enough). Until the
 * pool has started, each worker's handler reports to `failed` instead (which falls back to one thread
 * on the first report and ignores the rest, e.g. the other workers of a failed start); once the module
 * has started, the glue's own handler runs again.
 */
function catchWorkerStartErrors(pthread: MhaModuleOptions['PThread'], hasStarted: () => boolean, failed: (text: string) => void): void {
  for (const worker of [...(pthread?.unusedWorkers ?? []), ...(pthread?.runningWorkers ?? [])]) {
    const glueHandler = worker.onerror;
    worker.onerror = (event: unknown) => {
      if (hasStarted()) {
        glueHandler?.call(worker, event);
        return;
      }
      const e = (event ?? {}) as { filename?: unknown; lineno?: unknown; message?: unknown };
      failed(`worker sent an error! ${String(e.filename)}:${String(e.lineno)}: ${String(e.message)}`);
    };
  }
}

async function instantiate(source: WasmSource, wasmModule: WebAssembly.Module, threaded: boolean, workers: number): Promise<MhaWasmModule> {
  const mismatch = (detail: string, cause?: unknown): Error =>
    new Error(
      `mha-wasm: ${source.label} does not match this script (mha-wasm ${VERSION}): ${detail}; ${EXPECTED}, ` +
        'from the same release as the script',
      cause === undefined ? undefined : { cause },
    );
  const exported = WebAssembly.Module.exports(wasmModule);
  if (!threaded && !exported.some((e) => e.kind === 'memory')) {
    const names = exported.map((e) => e.name).join(', ');
    throw mismatch(`it is a WebAssembly module without a memory export (exports: ${names || 'none'})`);
  }
  let factory: MhaModuleFactory = createMhaModule;
  const moduleOptions: MhaModuleOptions = {};
  if (threaded) {
    const glue = await threadsGlue();
    factory = glue.factory;
    // Emscripten preloads this many workers before the module is ready (at least 1; see CMakeLists.txt).
    moduleOptions.mhaWorkers = Math.max(1, workers);
    const workerFile = glue.workerFile;
    moduleOptions.locateFile = (file) => (file.endsWith('.worker.js') ? workerFile : file);
    moduleOptions.mainScriptUrlOrBlob = glue.glueFile;
  }
  const wasm = await new Promise<MhaWasmModule>((resolve, reject) => {
    const timer = threaded
      ? setTimeout(() => {
          moduleOptions.PThread?.terminateAllThreads();
          reject(new ThreadsStartFailure(`the threaded build's ${Math.max(1, workers)} worker(s) did not start within ${THREADS_START_TIMEOUT_MS / 1000} s`));
        }, THREADS_START_TIMEOUT_MS)
      : undefined;
    let settled = false;
    let started = false;  // settled, and not by a failure
    const settle = <T>(fn: (value: T) => void) => (value: T) => {
      settled = true;
      clearTimeout(timer);
      fn(value);
    };
    const resolveSettled = settle(resolve);
    resolve = (module) => {
      started = !settled;
      resolveSettled(module);
    };
    reject = settle(reject);
    // A worker that fails to load (a file a bundler left out, a broken script, a CSP refusing it) fires
    // an error event: fall back at once instead of after the timeout.
    const workerFailed = (text: string): void => {
      if (settled) return;
      moduleOptions.PThread?.terminateAllThreads();
      reject(new ThreadsStartFailure(`a worker of the threaded build failed to start (${text})`));
    };
    factory(Object.assign(moduleOptions, {
      instantiateWasm(imports: WebAssembly.Imports, done: (instance: WebAssembly.Instance, module: WebAssembly.Module) => void) {
        // Errors here (a LinkError, or the glue failing on missing exports inside done()) would
        // otherwise leave the glue's ready promise pending forever.
        WebAssembly.instantiate(wasmModule, imports)
          .then((instance) => {
            done(instance, wasmModule);  // gives every pooled worker the glue's error handler
            if (threaded) catchWorkerStartErrors(moduleOptions.PThread, () => started, workerFailed);
          })
          .catch((error: unknown) => reject(mismatch(errorText(error), error)));
        return {};
      },
    })).then(resolve, (error: unknown) => reject(mismatch(errorText(error), error)));
  });
  const missing = REQUIRED_API.filter((name) => typeof (wasm as unknown as Record<string, unknown>)[name] !== 'function');
  if (missing.length > 0) throw mismatch(`it lacks ${missing.join(', ')}`);
  return wasm;
}

/** The glue and the .wasm must come from one release: the wasm reports its version. */
function checkWasmVersion(label: string, wasmVersion: string): void {
  if (wasmVersion !== VERSION) {
    throw new Error(
      `mha-wasm: version mismatch: the script is ${VERSION} but ${label} is ${wasmVersion}; ` +
        'serve the mha.wasm of the script\'s release',
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Heap staging. One allocation per instance is reused for every call and only grows, so steady-state
// calls allocate nothing and the wasm heap cannot fragment under mixed calls.

class Arena {
  private address = 0;
  private bytes = 0;

  constructor(private readonly wasm: MhaWasmModule) {}

  /** Returns a base address with room for `bytes`, or throws a RangeError naming `fn`. */
  reserve(fn: string, bytes: number): number {
    if (bytes <= this.bytes) return this.address;
    this.release();
    const address = bytes < 2 ** 31 ? this.wasm._malloc(bytes) : 0;
    if (address === 0) {
      throw new RangeError(`${fn}: the inputs and output need ${bytes} bytes of wasm memory, more than it can provide (2 GiB at most)`);
    }
    this.address = address;
    this.bytes = bytes;
    return address;
  }

  release(): void {
    if (this.address !== 0) this.wasm._free(this.address);
    this.address = 0;
    this.bytes = 0;
  }
}

/** Lays buffers out back to back, each 16-byte aligned, and returns their addresses. */
function layout(base: number, sizes: readonly number[]): number[] {
  const addresses: number[] = [];
  let offset = base;
  for (const size of sizes) {
    addresses.push(offset);
    offset += Math.ceil(size / 16) * 16;
  }
  return addresses;
}

function totalBytes(sizes: readonly number[]): number {
  return sizes.reduce((sum, size) => sum + Math.ceil(size / 16) * 16, 0);
}

/**
 * Copies elements [start, start + length) of a Float32Array argument into the staging slot at byte
 * address `at`. The staging malloc detaches views of this instance's own heap (a tensor's `data`, or
 * what a call with a HeapTensor `out` returned) when it grows the memory; no other buffer can be
 * detached during a call (no user code runs), so an argument that now reads as empty is such a view,
 * found again in the heap by the byte offset it had before the malloc.
 */
function copyIn(heap: Float32Array, array: Float32Array, byteOffset: number, start: number, length: number, at: number): void {
  if (array.length === 0 && length !== 0) {
    heap.copyWithin(at >>> 2, (byteOffset >>> 2) + start, (byteOffset >>> 2) + start + length);
  } else {
    heap.set(start === 0 && length === array.length ? array : array.subarray(start, start + length), at >>> 2);
  }
}

/** The byte offset of a Float32Array operand, read before any malloc of the call (0 for a HeapTensor's address). */
function byteOffsetOf(operand: Float32Array | number | undefined): number {
  return operand instanceof Float32Array ? operand.byteOffset : 0;
}

/** Staging bytes of a multiHeadAttention operand: none for a HeapTensor (its address, a number). */
function stagedBytes(operand: Float32Array | number | undefined, length: number): number {
  return typeof operand === 'number' ? 0 : length * 4;
}

/**
 * The address the kernel reads elements [start, start + length) of an operand from: a HeapTensor's own,
 * or the staging slot `at` that a Float32Array's elements are copied to.
 */
function place(heap: Float32Array, operand: Float32Array | number, byteOffset: number, start: number, length: number,
  at: number): number {
  if (typeof operand === 'number') return operand + start * 4;
  copyIn(heap, operand, byteOffset, start, length, at);
  return at;
}

type NodeBuffer = { allocUnsafeSlow?: (size: number) => Uint8Array };
/** Node's uninitialized allocation (undefined in browsers), looked up once. */
const allocUnsafeSlow = (globalThis as { Buffer?: NodeBuffer }).Buffer?.allocUnsafeSlow;

/**
 * A new Float32Array that the caller overwrites entirely. From 16 KiB up, in Node, it is uninitialized
 * memory (Buffer.allocUnsafeSlow: a fresh ArrayBuffer of exactly this size, pooled with nothing), which
 * skips zero-filling what is overwritten next (that memset was 2.5% of a bert call). Smaller arrays, other
 * engines, or a Buffer polyfill that returns anything else: a zeroed array (for the seed shape's 120
 * floats that is 0.2 us faster a call).
 */
function unfilledFloat32Array(length: number): Float32Array {
  if (allocUnsafeSlow !== undefined && length >= 4096) {
    const bytes = allocUnsafeSlow(length * 4);
    if (bytes instanceof Uint8Array && bytes.byteOffset === 0 && bytes.buffer instanceof ArrayBuffer &&
      bytes.buffer.byteLength === length * 4) {
      return new Float32Array(bytes.buffer, 0, length);
    }
  }
  return new Float32Array(length);
}

/** Elements [from, from + length) of `heap` in a new Float32Array of their own. */
function copyOut(heap: Float32Array, from: number, length: number): Float32Array {
  const result = unfilledFloat32Array(length);
  result.set(heap.subarray(from, from + length));
  return result;
}

/**
 * About the L2 cache of a client CPU: the staging of one kernel call of a multi-item batch is kept near
 * this size (see stagingGroup).
 */
const STAGING_GROUP_BYTES = 1 << 20;

/**
 * How many batch items multiHeadAttention stages per kernel call. Staging a whole large call copies all
 * inputs before the kernel reads any of them: past the L2 cache the kernel then reads them back from
 * memory, and the copy-out reads a cold output. Staged a group of items at a time, each copy is still
 * in cache when it is read (measured, 1 thread: bert-b8 13.5-13.9 ms instead of 15.7-16.6, cross
 * (4,64,1024,512,8) 18.2-18.6 instead of 19.9-20.4). The result has the same bits: the kernel runs every
 * (batch item, head, query row) through the same operations however the call is split.
 *
 * A call is split only when its batch slices are independent: no Float32Array that views this heap (the
 * staging malloc can detach it, which the whole-call path handles), and an `out` array that overlaps an
 * input only as the identical range (then each group writes only rows that group has already read).
 * `perItem`: the bytes staged per batch item.
 */
function stagingGroup(wasm: MhaWasmModule, batch: number, perItem: number, inputs: readonly (Float32Array | number | undefined)[],
  out: Float32Array | number | undefined, mask: Uint8Array | undefined): number {
  const heapBuffer = wasm.HEAPF32.buffer;
  if (mask?.buffer === heapBuffer) return batch;
  for (const operand of [...inputs, out]) {
    if (operand instanceof Float32Array && operand.buffer === heapBuffer) return batch;
  }
  if (out instanceof Float32Array) {
    for (const input of inputs) {
      if (!(input instanceof Float32Array) || input === out || input.buffer !== out.buffer) continue;
      const same = input.byteOffset === out.byteOffset && input.length === out.length;
      const overlap = input.byteOffset < out.byteOffset + out.byteLength && out.byteOffset < input.byteOffset + input.byteLength;
      if (overlap && !same) return batch;
    }
  }
  return Math.max(1, Math.min(batch, Math.floor(STAGING_GROUP_BYTES / perItem)));
}

// ---------------------------------------------------------------------------------------------
// Heap tensors: malloc'd blocks of an instance's heap that multiHeadAttention takes by address. The
// state is in private fields, so neither a Proxy nor a look-alike object passes for a tensor, and the
// address and length the kernel trusts cannot be changed from outside.

class Tensor implements HeapTensor {
  readonly #wasm: MhaWasmModule;
  readonly #live: Set<Tensor>;
  readonly #length: number;
  /** What malloc returned, for free(). */
  readonly #block: number;
  /** Byte address of element 0 on the heap; 0 once freed. */
  #address: number;
  /** What freed the tensor, for the errors of later uses. */
  #freedBy = '';
  /** The last `data` view, replaced when the memory's buffer has changed (grown). */
  #view: Float32Array | undefined;

  constructor(wasm: MhaWasmModule, live: Set<Tensor>, block: number, address: number, length: number) {
    this.#wasm = wasm;
    this.#live = live;
    this.#block = block;
    this.#address = address;
    this.#length = length;
    live.add(this);
  }

  static is(value: unknown): value is Tensor {
    return typeof value === 'object' && value !== null && #address in value;
  }

  static isLive(tensor: Tensor): boolean {
    return tensor.#address !== 0;
  }

  static describe(tensor: Tensor): string {
    return `HeapTensor(${tensor.#length}${tensor.#address === 0 ? ', freed' : ''})`;
  }

  /**
   * The address of `tensor` as the argument `name` of a call of the instance that owns `wasm`, after
   * checking that it is live, of that instance and of the expected length.
   */
  static addressFor(name: string, tensor: Tensor, wasm: MhaWasmModule, expected: number, formula: () => string): number {
    tensor.#checkLive(name);
    if (tensor.#wasm !== wasm) {
      throw new TypeError(`${name}: the HeapTensor belongs to another mha-wasm instance (each has its own wasm memory); allocate it with this instance's allocate()`);
    }
    if (tensor.#length !== expected) {
      throw new RangeError(`${name}: expected HeapTensor of length ${expected} (${formula()}), got length ${tensor.#length}`);
    }
    return tensor.#address;
  }

  /** Frees the memory once; `by` is what later errors say freed it. */
  static release(tensor: Tensor, by: string): void {
    if (tensor.#address === 0) return;
    tensor.#wasm._free(tensor.#block);
    tensor.#address = 0;
    tensor.#view = undefined;
    tensor.#freedBy = by;
    tensor.#live.delete(tensor);
  }

  get length(): number {
    return this.#length;
  }

  get data(): Float32Array {
    this.#checkLive('HeapTensor.data');
    return this.#currentView();
  }

  set(source: Float32Array, offset: number = 0): void {
    const fn = 'HeapTensor.set';
    this.#checkLive(fn);
    if (!(source instanceof Float32Array) || !ArrayBuffer.isView(source)) {
      throw new TypeError(`${fn}: source: expected a Float32Array, got ${describe(source)}`);
    }
    checkNotDetached(`${fn}: source`, source);
    if (typeof offset !== 'number') {
      throw new TypeError(`${fn}: offset: expected an integer in [0, ${this.#length}], got ${describe(offset)}`);
    }
    if (!Number.isInteger(offset) || offset < 0 || offset > this.#length) {
      throw new RangeError(`${fn}: offset: expected an integer in [0, ${this.#length}], got ${offset}`);
    }
    if (source.length > this.#length - offset) {
      throw new RangeError(
        `${fn}: source: expected at most ${this.#length - offset} elements (length ${this.#length} - offset ${offset}), got length ${source.length}`,
      );
    }
    this.#currentView().set(source, offset);
  }

  toArray(): Float32Array {
    this.#checkLive('HeapTensor.toArray');
    return copyOut(this.#currentView(), 0, this.#length);
  }

  free(): void {
    Tensor.release(this, 'free()');
  }

  #currentView(): Float32Array {
    const buffer = this.#wasm.HEAPF32.buffer;
    if (this.#view?.buffer !== buffer) this.#view = new Float32Array(buffer, this.#address, this.#length);
    return this.#view;
  }

  #checkLive(name: string): void {
    if (this.#address === 0) {
      throw new TypeError(`${name}: the HeapTensor was freed (by ${this.#freedBy}); allocate a new one`);
    }
  }
}

/** A q, k, v or out argument of multiHeadAttention: a Float32Array to stage, or a HeapTensor's address. */
function checkOperand(name: string, value: unknown, expected: number, formula: () => string, wasm: MhaWasmModule): Float32Array | number {
  if (Tensor.is(value)) return Tensor.addressFor(name, value, wasm, expected, formula);
  if (value instanceof Tensor) {
    throw new TypeError(`${name}: expected a HeapTensor, got an object that only inherits from HeapTensor (e.g. a Proxy)`);
  }
  return checkFloat32(name, value, expected, formula, ' or a HeapTensor of that length');
}

/**
 * Option getters and boolean[] mask entries are user code that runs after q, k (and v) were checked;
 * it could free one of those tensors or detach one of those arrays. Checked again once no user code can
 * run any more, before the heap is touched.
 */
function checkStillUsable(name: string, value: unknown, operand: Float32Array | number | undefined, length: number): void {
  if (typeof operand === 'number' ? !Tensor.isLive(value as Tensor) : operand !== undefined && operand.length !== length) {
    const what = typeof operand === 'number' ? 'the HeapTensor was freed' : "the Float32Array's ArrayBuffer was detached";
    throw new TypeError(`${name}: ${what} during validation, by an option getter or a boolean[] mask entry`);
  }
}

const qFormula = (d: Dims): string => `batch*seqLen*dModel = ${d.batch}*${d.seqLen}*${d.dModel}`;
const kvFormula = (d: Dims): string => `batch*kvSeqLen*dModel = ${d.batch}*${d.kvSeqLen}*${d.dModel}`;

/**
 * What multiHeadAttention and attentionWeights both check, in this order: dims, q, k, v (when `withV`),
 * mask, causal and scale. `check` validates each tensor argument and returns what the call uses of it.
 */
function checkAttentionInputs<T>(fn: string, o: Record<string, unknown>, q: unknown, k: unknown, withV: boolean, v: unknown,
  check: (name: string, value: unknown, expected: number, formula: () => string) => T) {
  const d = checkDims(fn, o, true);
  const qLength = d.batch * d.seqLen * d.dModel;
  const kvLength = d.batch * d.kvSeqLen * d.dModel;
  const qIn = check(`${fn}: q`, q, qLength, () => qFormula(d));
  const kIn = check(`${fn}: k`, k, kvLength, () => kvFormula(d));
  const vIn = withV ? check(`${fn}: v`, v, kvLength, () => kvFormula(d)) : undefined;
  const mask = checkMask(fn, o.mask, d);
  const causal = checkCausal(fn, o.causal);
  const scale = checkScale(fn, o.scale, d.headDim);
  return { d, qLength, kvLength, mask, causal, scale, qIn, kIn, vIn };
}

const ATTENTION_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads', 'kvSeqLen', 'mask', 'causal', 'scale', 'out'] as const;
const WEIGHTS_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads', 'kvSeqLen', 'mask', 'causal', 'scale'] as const;
const HEAD_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads'] as const;
const CREATE_KEYS = ['threads', 'simd', 'wasmUrl', 'wasmBinary', 'warmup'] as const;

class Instance implements MHA {
  // Replaced (not mutated) when dispose() ends the pool, so a caller's copy stays a true snapshot.
  private currentInfo: MHAInfo;
  private readonly arena: Arena;
  /** Live tensors of this instance, freed by dispose(). */
  private readonly tensors = new Set<Tensor>();

  constructor(private readonly wasm: MhaWasmModule, build: BuildName, threads: number) {
    this.arena = new Arena(wasm);
    this.currentInfo = Object.freeze({ version: wasm.version(), simd: wasm.simd(), threads, build });
  }

  get info(): MHAInfo {
    return this.currentInfo;
  }

  multiHeadAttention(q: Float32Array | HeapTensor, k: Float32Array | HeapTensor, v: Float32Array | HeapTensor,
    options: AttentionOptions): Float32Array {
    const fn = 'multiHeadAttention';
    const o = checkOptionsObject(`${fn}: options`, options, ATTENTION_KEYS);
    const wasm = this.wasm;
    const { d, qLength, kvLength, mask, causal, scale, qIn, kIn, vIn } = checkAttentionInputs(fn, o, q, k, true, v,
      (name, value, expected, formula) => checkOperand(name, value, expected, formula, wasm));
    // A number is a HeapTensor's address: used in place, so it gets no staging slot.
    const outValue = o.out;
    const outIn = outValue === undefined ? undefined : checkOperand(`${fn}: out`, outValue, qLength, () => qFormula(d), wasm);
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kvLength);
    checkStillUsable(`${fn}: v`, v, vIn, kvLength);
    if (typeof outIn === 'number') {
      // Distinct live tensors never overlap, so only the same tensor can alias the output.
      for (const [name, input] of [['q', qIn], ['k', kIn], ['v', vIn]] as const) {
        if (input === outIn) {
          throw new TypeError(`${fn}: out: expected a HeapTensor other than ${name} (the kernel reads ${name} while it writes out), got ${name} itself`);
        }
      }
    }

    // Self-attention often passes one array as q, k and v: it is staged once (the kernel only reads them).
    const kIsQ = kIn === qIn;
    const vIsK = vIn === kIn;
    const vIsQ = !vIsK && vIn === qIn;
    // Per batch item: elements of q/out and of k/v, bytes of the mask; then the bytes staged per item.
    const qPer = d.seqLen * d.dModel;
    const kvPer = d.kvSeqLen * d.dModel;
    const maskPer = d.seqLen * d.kvSeqLen;
    // The kernel may write its result over q (attention.hpp): a staged q that k and v do not share takes
    // it, so the call stages one buffer fewer (bert: 1.2 instead of 1.6 MB, 2-3% faster a call).
    const resultInQ = typeof qIn !== 'number' && typeof outIn !== 'number' && !kIsQ && vIn !== qIn;
    const perItem = stagedBytes(qIn, qPer) + (kIsQ ? 0 : stagedBytes(kIn, kvPer)) + (vIsK || vIsQ ? 0 : stagedBytes(vIn, kvPer)) +
      (resultInQ ? 0 : stagedBytes(outIn, qPer)) + (mask ? maskPer : 0);
    const group = perItem * d.batch <= STAGING_GROUP_BYTES ? d.batch
      : stagingGroup(wasm, d.batch, perItem, [qIn, kIn, vIn], outIn, mask);
    const sizes = [stagedBytes(qIn, group * qPer), kIsQ ? 0 : stagedBytes(kIn, group * kvPer),
      vIsK || vIsQ ? 0 : stagedBytes(vIn, group * kvPer), resultInQ ? 0 : stagedBytes(outIn, group * qPer), mask ? group * maskPer : 0];
    const [qOffset, kOffset, vOffset, outOffset] = [byteOffsetOf(qIn), byteOffsetOf(kIn), byteOffsetOf(vIn), byteOffsetOf(outIn)];
    // The only allocation of the call: it may grow (and so detach) memory, so views are taken after it.
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const [qAt, kAt, vAt, outSlot, maskAt] = layout(base, sizes) as [number, number, number, number, number];
    const outAt = resultInQ ? qAt : outSlot;
    const target = typeof outIn === 'number' ? undefined : outIn ?? unfilledFloat32Array(qLength);
    for (let b0 = 0; b0 < d.batch; b0 += group) {
      const items = Math.min(group, d.batch - b0);
      const heap = wasm.HEAPF32;
      const qAddress = place(heap, qIn, qOffset, b0 * qPer, items * qPer, qAt);
      const kAddress = kIsQ ? qAddress : place(heap, kIn, kOffset, b0 * kvPer, items * kvPer, kAt);
      const vAddress = vIsK ? kAddress : vIsQ ? qAddress : place(heap, vIn!, vOffset, b0 * kvPer, items * kvPer, vAt);
      if (mask) wasm.HEAPU8.set(group === d.batch ? mask : mask.subarray(b0 * maskPer, (b0 + items) * maskPer), maskAt);
      const status = wasm._mha_attention(qAddress, kAddress, vAddress, typeof outIn === 'number' ? outIn + b0 * qPer * 4 : outAt,
        mask ? maskAt : 0, items, d.seqLen, d.kvSeqLen, d.dModel, d.numHeads, causal ? 1 : 0, scale);
      checkStatus(fn, status);
      if (target === undefined) continue;
      // The kernel's scratch may have grown memory: a fresh view to copy out.
      const result = wasm.HEAPF32;
      if (target.length !== qLength) {
        // `out` is a view of this heap that the call's malloc detached (see copyIn; such a call is never
        // split): write the same elements and hand back a view of them in the current memory.
        result.copyWithin(outOffset >>> 2, outAt >>> 2, (outAt >>> 2) + qLength);
        return new Float32Array(result.buffer, outOffset, qLength);
      }
      target.set(result.subarray(outAt >>> 2, (outAt >>> 2) + items * qPer), b0 * qPer);
    }
    return target ?? (outValue as Tensor).data;
  }

  allocate(length: number): HeapTensor {
    const fn = 'allocate';
    checkDim(`${fn}: length`, length);
    const bytes = length * 4;
    // malloc aligns to 8 bytes here (emmalloc: alignof(max_align_t)); 12 spare bytes let the tensor start
    // on a 16-byte boundary, a whole v128, for any malloc alignment of at least 4.
    const block = bytes + 12 < 2 ** 31 ? this.wasm._malloc(bytes + 12) : 0;
    if (block === 0) {
      throw new RangeError(`${fn}: length: ${length} floats need ${bytes} bytes of wasm memory, more than it can provide (2 GiB at most)`);
    }
    return new Tensor(this.wasm, this.tensors, block, Math.ceil(block / 16) * 16, length);
  }

  attentionWeights(q: Float32Array, k: Float32Array, options: AttentionWeightsOptions): Float32Array {
    const fn = 'attentionWeights';
    const o = checkOptionsObject(`${fn}: options`, options, WEIGHTS_KEYS);
    const { d, qLength, kvLength: kLength, mask, causal, scale, qIn, kIn } = checkAttentionInputs(fn, o, q, k, false, undefined,
      checkFloat32);
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kLength);
    const weightsLength = d.batch * d.numHeads * d.seqLen * d.kvSeqLen;
    if (weightsLength >= MAX_ELEMENTS) {
      throw new RangeError(
        `${fn}: shape too large: batch*numHeads*seqLen*kvSeqLen = ${weightsLength} weights, expected fewer than 2^31`,
      );
    }

    const sizes = [qLength * 4, kLength * 4, weightsLength * 4, mask ? mask.length : 0];
    const [qOffset, kOffset] = [qIn.byteOffset, kIn.byteOffset];
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const [qAt, kAt, wAt, maskAt] = layout(base, sizes) as [number, number, number, number];
    const heap = this.wasm.HEAPF32;
    copyIn(heap, qIn, qOffset, 0, qLength, qAt);
    copyIn(heap, kIn, kOffset, 0, kLength, kAt);
    if (mask) this.wasm.HEAPU8.set(mask, maskAt);
    const status = this.wasm._mha_attention_weights(qAt, kAt, wAt, mask ? maskAt : 0, d.batch, d.seqLen, d.kvSeqLen,
      d.dModel, d.numHeads, causal ? 1 : 0, scale);
    checkStatus(fn, status);
    return copyOut(this.wasm.HEAPF32, wAt >>> 2, weightsLength);
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
    for (const tensor of this.tensors) Tensor.release(tensor, 'dispose()');
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
    checkFloat32(`${fn}: ${name}`, x, length, formula);
    const sizes = [length * 4, length * 4];
    const xOffset = x.byteOffset;
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const [fromAt, toAt] = layout(base, sizes) as [number, number];
    copyIn(this.wasm.HEAPF32, x, xOffset, 0, length, fromAt);
    const status = split
      ? this.wasm._mha_split_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads)
      : this.wasm._mha_merge_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads);
    checkStatus(fn, status);
    return copyOut(this.wasm.HEAPF32, toAt >>> 2, length);
  }
}

/**
 * Loads the WebAssembly module and returns a ready instance. By default the `.wasm` file is located
 * next to this script (`new URL('./mha.wasm', import.meta.url)`, which Vite and webpack rewrite), read
 * from disk in Node and fetched in browsers; `wasmUrl` or `wasmBinary` override that. Compilation is
 * memoized per source; each call returns a new, independent instance.
 *
 * @param options - `{ threads, wasmUrl, wasmBinary }`; see {@link CreateOptions}
 * @returns a promise of an {@link MHA} instance
 * @throws TypeError / RangeError for bad options (both wasmUrl and wasmBinary given, wrong types)
 * @throws Error when the wasm cannot be read (HTTP error, missing file), is not WebAssembly (e.g. an
 *   HTML page), is not this package's module, or reports another version than this script; the message
 *   names what was fetched and what was expected
 * @example
 * ```ts
 * import { createMHA } from 'mha-wasm';
 * const mha = await createMHA();
 * const out = mha.multiHeadAttention(q, k, v, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
 * ```
 */
export async function createMHA(options: CreateOptions = {}): Promise<MHA> {
  const o = checkOptionsObject('createMHA: options', options, CREATE_KEYS);
  if (o.threads !== undefined && o.threads !== 'auto') {
    if (typeof o.threads !== 'number') {
      throw new TypeError(`createMHA: threads: expected a positive integer or 'auto', got ${describe(o.threads)}`);
    }
    if (!Number.isInteger(o.threads) || o.threads < 1 || o.threads > MAX_THREADS) {
      throw new RangeError(`createMHA: threads: expected a positive integer up to ${MAX_THREADS} or 'auto', got ${o.threads}`);
    }
  }
  if (o.warmup !== undefined && typeof o.warmup !== 'boolean') {
    throw new TypeError(`createMHA: warmup: expected a boolean, got ${describe(o.warmup)}`);
  }
  if (o.simd !== undefined && o.simd !== 'auto' && o.simd !== false) {
    const message = `createMHA: simd: expected 'auto' or false, got ${describe(o.simd)}`;
    throw typeof o.simd === 'string' || typeof o.simd === 'boolean' ? new RangeError(message) : new TypeError(message);
  }
  const requested = o.threads === 'auto' ? Math.min(MAX_AUTO_THREADS, await coreCount()) : ((o.threads as number | undefined) ?? 1);
  const simdWanted = o.simd !== false;
  const custom = o.wasmUrl !== undefined || o.wasmBinary !== undefined;

  // Which build: SIMD unless disabled or unsupported; threaded when more than one thread is asked for and
  // the environment can run it. Otherwise single-threaded, with a warning naming the reason.
  let build: BuildName;
  let reason: string | undefined;
  const simdOk = simdWanted && validates(SIMD_PROBE);
  if (requested > 1) {
    if (!simdWanted) reason = 'simd: false selects the baseline build, which is single-threaded';
    else if (!simdOk) reason = 'this engine lacks WebAssembly SIMD128, which the threaded build needs';
    else reason = threadsUnavailable();
  }
  build = requested > 1 && reason === undefined ? 'simd-threads' : simdOk ? 'simd' : 'baseline';

  const source = custom ? sourceFromOptions(o) : defaultSource(build);
  const compiled = await compiledBuild(source);
  const wasmModule = compiled.wasmModule;
  let threaded = compiled.threaded;
  if (custom) {
    // The given file decides the build.
    if (threaded) {
      const why = threadsUnavailable();
      if (why !== undefined) throw new Error(`mha-wasm: ${source.label} is the threaded build, which cannot run here: ${why}`);
      reason = undefined;
    } else if (requested > 1 && reason === undefined) {
      reason = `${source.label} is a single-threaded build (pass mha-threads.wasm for threads)`;
    }
  }
  let wasm: MhaWasmModule;
  let usedModule = wasmModule;
  try {
    wasm = await instantiate(source, wasmModule, threaded, requested - 1);
  } catch (error) {
    // Never hang on a threaded start-up that stalls: the single-threaded SIMD build still works.
    if (!(error instanceof ThreadsStartFailure) || custom) throw error;
    reason = error.message;
    build = 'simd';
    const fallback = defaultSource(build);
    usedModule = (await compiledBuild(fallback)).wasmModule;
    wasm = await instantiate(fallback, usedModule, false, 0);
    threaded = false;
  }
  checkWasmVersion(source.label, wasm.version());
  if (custom) build = threaded ? 'simd-threads' : wasm.simd() ? 'simd' : 'baseline';

  let threads = 1;
  if (threaded) {
    threads = wasm._mha_set_threads(Math.max(1, requested));
    if (threads < requested) reason = `only ${threads} of ${requested} threads could be started`;
    // Node: the workers alone do not keep the process alive (calls are synchronous, so nothing waits on
    // them between calls); a script that forgets dispose() still exits.
    if (isNode()) {
      for (const worker of [...(wasm.PThread?.unusedWorkers ?? []), ...(wasm.PThread?.runningWorkers ?? [])]) {
        worker.unref?.();
      }
    }
  }
  if (reason !== undefined && requested > 1) warnSingleThreaded(requested, reason);
  const instance = new Instance(wasm, build, threads);
  // Instances of one compiled module share its code, tiered-up functions included: warm each module once.
  if (o.warmup !== false && !warmedModules.has(usedModule) && (await warmUp(instance))) warmedModules.add(usedModule);
  return instance;
}

/** Compiled modules whose warm-up saw the optimizing tier take over. */
const warmedModules = new WeakSet<WebAssembly.Module>();

/**
 * Runs a small attention (1, 128, 128, 128, 2 heads: the same micro-kernels as any head size) until two
 * calls in a row take under 40 % of the baseline, i.e. the optimizing tier has replaced the baseline
 * code, or 250 ms have passed. The baseline is the fastest of calls 1-4: call 0 includes lazy
 * compilation, and single calls can be slowed by a GC or a compile on this thread, which once made a
 * noisy baseline accept baseline-tier code (Chromium, a module from the code cache: the next calls ran
 * 6-8x slower than warm). Yields to the event loop now and then so the page stays responsive. Returns
 * whether the tier-up was seen (false after 250 ms without it).
 */
async function warmUp(mha: MHA): Promise<boolean> {
  const shape = { batch: 1, seqLen: 128, dModel: 128, numHeads: 2 };
  const x = Float32Array.from({ length: 128 * 128 }, (_, i) => Math.sin(i * 0.37));
  const out = new Float32Array(x.length);
  const start = performance.now();
  let baseline = Infinity;
  let fastInARow = 0;
  for (let call = 0; performance.now() - start < 250; call++) {
    const t = performance.now();
    mha.multiHeadAttention(x, x, x, { ...shape, out });
    const elapsed = performance.now() - t;
    if (call >= 1 && call <= 4) baseline = Math.min(baseline, elapsed);
    else if (call > 4) {
      fastInARow = elapsed < 0.4 * baseline ? fastInARow + 1 : 0;
      if (fastInARow === 2) return true;
    }
    if (call % 8 === 7) await new Promise((resolve) => setTimeout(resolve, 0));
  }
  return false;
}

/** The package version of this script. */
export const version: string = VERSION;
