// Argument checks shared by every function of the API. Each throws a TypeError (wrong type, missing) or
// RangeError (bad value or length) whose message names the parameter, says what was expected and what was
// given. Nothing here knows heap tensors (heap-tensor.ts builds on these checks) or touches wasm memory.
import { describe } from './describe.js';

/** The option keys each function accepts: any other key that is not undefined is a TypeError (a typo). */
const COMMON_KEYS = [
  'batch',
  'seqLen',
  'dModel',
  'numHeads',
  'kvSeqLen',
  'mask',
  'causal',
  'scale',
  'numKvHeads',
  'queryOffset',
  'kvLengths',
  'window',
  'softcap',
  'alibiSlopes',
  'bias',
  'biasShape',
  'emptyRows',
  'sinks',
  'rope',
] as const;
export const WEIGHTS_KEYS = [...COMMON_KEYS, 'stage'] as const;
export const ATTENTION_KEYS = [...COMMON_KEYS, 'out', 'lse', 'vHeadDim', 'dtype'] as const;
export const HEAD_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads'] as const;
export const CREATE_KEYS = ['threads', 'simd', 'wasmUrl', 'wasmBinary', 'warmup'] as const;

/** Largest element count of any one tensor: flat indices stay within int32, as in the C++ core. */
export const MAX_ELEMENTS = 2 ** 31;

export function checkOptionsObject(
  name: string,
  options: unknown,
  allowed: readonly string[],
): Record<string, unknown> {
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

export function checkDim(name: string, value: unknown): number {
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

export function checkNotDetached(name: string, value: ArrayBufferView): void {
  if (isDetached(value)) {
    throw new TypeError(
      `${name}: the ${value.constructor.name}'s ArrayBuffer is detached (transferred or released); pass an array ` +
        `whose buffer is live`,
    );
  }
}

/**
 * `formula()` explains the expected length; it is only built for an error message. `alternative` names
 * what else the parameter accepts, for the type error; `hint` is appended to it.
 */
export function checkFloat32(
  name: string,
  value: unknown,
  expected: number,
  formula: () => string,
  alternative = '',
  hint = '',
): Float32Array {
  if (!(value instanceof Float32Array)) {
    throw new TypeError(
      `${name}: expected Float32Array of length ${expected} (${formula()})${alternative}, got ` +
        `${describe(value)}${hint}`,
    );
  }
  if (!ArrayBuffer.isView(value)) {
    // e.g. a Proxy: its reads would run user code while the call stages data in the wasm heap.
    throw new TypeError(
      `${name}: expected a Float32Array, got an object that only inherits from Float32Array (e.g. a Proxy)`,
    );
  }
  checkNotDetached(name, value);
  if (value.length !== expected) {
    throw new RangeError(
      `${name}: expected Float32Array of length ${expected} (${formula()}), got length ${value.length}`,
    );
  }
  return value;
}

/** The dims of a call, checked: B, S, T, D, H, Hkv, Dh = D / H, and the width of k and v, Hkv·Dh. */
export interface Dims {
  batch: number;
  seqLen: number;
  kvSeqLen: number;
  dModel: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  kvDModel: number;
  /**
   * The vHeadDim option as given (0: not given), Dv (= headDim unless given), and the widths Hkv·Dv of v and H·Dv of
   * out.
   */
  vHeadDim: number;
  valueDim: number;
  vDModel: number;
  outDModel: number;
}

/**
 * The dims of `o`. `withKv` (the attention functions): also kvSeqLen (default seqLen) and numKvHeads
 * (default numHeads), which must divide numHeads.
 */
export function checkDims(fn: string, o: Record<string, unknown>, withKv: boolean): Dims {
  const batch = checkDim(`${fn}: batch`, o.batch);
  const seqLen = checkDim(`${fn}: seqLen`, o.seqLen);
  const dModel = checkDim(`${fn}: dModel`, o.dModel);
  const numHeads = checkDim(`${fn}: numHeads`, o.numHeads);
  const kvSeqLen = withKv && o.kvSeqLen !== undefined ? checkDim(`${fn}: kvSeqLen`, o.kvSeqLen) : seqLen;
  if (dModel % numHeads !== 0) {
    throw new RangeError(
      `${fn}: dModel: expected a multiple of numHeads (${numHeads}), got ${dModel} (${dModel} % ${numHeads} = ` +
        `${dModel % numHeads})`,
    );
  }
  const numKvHeads = withKv && o.numKvHeads !== undefined ? checkDim(`${fn}: numKvHeads`, o.numKvHeads) : numHeads;
  if (numHeads % numKvHeads !== 0) {
    throw new RangeError(
      `${fn}: numKvHeads: expected a divisor of numHeads (${numHeads}), got ${numKvHeads} ` +
        `(${numHeads} % ${numKvHeads} = ${numHeads % numKvHeads})`,
    );
  }
  const headDim = dModel / numHeads;
  // vHeadDim is read only where it is an accepted option (multiHeadAttention): elsewhere it was refused.
  const vHeadDim = withKv && o.vHeadDim !== undefined ? checkDim(`${fn}: vHeadDim`, o.vHeadDim) : 0;
  const valueDim = vHeadDim || headDim;
  const d = {
    batch,
    seqLen,
    kvSeqLen,
    dModel,
    numHeads,
    numKvHeads,
    headDim,
    kvDModel: numKvHeads * headDim,
    vHeadDim,
    valueDim,
    vDModel: numKvHeads * valueDim,
    outDModel: numHeads * valueDim,
  };
  // Only q, k, v and out here: the kernel never forms an (S, T) tensor, so seqLen*kvSeqLen may pass 2^31;
  // a mask (checkMask), a bias or attention weights (attentionWeights) have their own limit.
  for (const [what, count] of [
    ['batch*seqLen*dModel', batch * seqLen * dModel],
    [kvTerms(d), batch * kvSeqLen * d.kvDModel],
    ['batch*kvSeqLen*numKvHeads*vHeadDim', batch * kvSeqLen * d.vDModel],
    ['batch*seqLen*numHeads*vHeadDim', batch * seqLen * d.outDModel],
  ] as const) {
    if (count >= MAX_ELEMENTS) {
      throw new RangeError(`${fn}: shape too large: ${what} = ${count} elements, expected fewer than 2^31`);
    }
  }
  return d;
}

/** What the length of q (and out) is made of, for messages: (B, S, D). */
export const qFormula = (d: Dims): string => `batch*seqLen*dModel = ${d.batch}*${d.seqLen}*${d.dModel}`;
/** What the length of v is made of: (B, T, Hkv·Dv); as kvFormula without vHeadDim. */
export const vFormula = (d: Dims): string =>
  d.vHeadDim === 0
    ? kvFormula(d)
    : `batch*kvSeqLen*numKvHeads*vHeadDim = ${d.batch}*${d.kvSeqLen}*${d.numKvHeads}*${d.vHeadDim}`;
/** What the length of out is made of: (B, S, H·Dv); as qFormula without vHeadDim. */
export const outFormula = (d: Dims): string =>
  d.vHeadDim === 0
    ? qFormula(d)
    : `batch*seqLen*numHeads*vHeadDim = ${d.batch}*${d.seqLen}*${d.numHeads}*${d.vHeadDim}`;
/** The dims the length of k and v is made of: (B, T, D), or (B, T, Hkv·Dh) with grouped-query attention. */
const kvTerms = (d: Dims): string =>
  d.numKvHeads === d.numHeads ? 'batch*kvSeqLen*dModel' : 'batch*kvSeqLen*numKvHeads*headDim';
/** The same as qFormula for k and v. */
export const kvFormula = (d: Dims): string =>
  `${kvTerms(d)} = ` +
  (d.numKvHeads === d.numHeads
    ? `${d.batch}*${d.kvSeqLen}*${d.dModel}`
    : `${d.batch}*${d.kvSeqLen}*${d.numKvHeads}*${d.headDim}`);

/** A short list for a message: `[3, -1]` (at most 8 entries shown), or what describe() says of a non-array. */
export function describeList(value: unknown): string {
  if (!Array.isArray(value) && !(ArrayBuffer.isView(value) && !(value instanceof DataView))) return describe(value);
  const entries = Array.from({ length: Math.min(8, (value as ArrayLike<unknown>).length) }, (_, i) =>
    describe((value as ArrayLike<unknown>)[i]),
  );
  return `[${entries.join(', ')}${(value as ArrayLike<unknown>).length > 8 ? ', …' : ''}]`;
}
