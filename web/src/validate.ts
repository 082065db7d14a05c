// Argument checks shared by every function of the API. Each throws a TypeError (wrong type, missing) or
// RangeError (bad value or length) whose message names the parameter, says what was expected and what was
// given. Nothing here knows heap tensors (heap-tensor.ts builds on these checks) or touches wasm memory.
import { describe } from './describe.js';

/** The option keys each function accepts: any other key that is not undefined is a TypeError (a typo). */
export const ATTENTION_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads', 'kvSeqLen', 'mask', 'causal', 'scale', 'out'] as const;
export const WEIGHTS_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads', 'kvSeqLen', 'mask', 'causal', 'scale'] as const;
export const HEAD_KEYS = ['batch', 'seqLen', 'dModel', 'numHeads'] as const;
export const CREATE_KEYS = ['threads', 'simd', 'wasmUrl', 'wasmBinary', 'warmup'] as const;

/** Largest element count of any one tensor: flat indices stay within int32, as in the C++ core. */
export const MAX_ELEMENTS = 2 ** 31;

export function checkOptionsObject(name: string, options: unknown, allowed: readonly string[]): Record<string, unknown> {
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
    throw new TypeError(`${name}: the ${value.constructor.name}'s ArrayBuffer is detached (transferred or released); pass an array whose buffer is live`);
  }
}

/**
 * `formula()` explains the expected length; it is only built for an error message. `alternative` names
 * what else the parameter accepts, for the type error; `hint` is appended to it.
 */
export function checkFloat32(name: string, value: unknown, expected: number, formula: () => string, alternative = '',
  hint = ''): Float32Array {
  if (!(value instanceof Float32Array)) {
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

/** The dims of a call, checked: B, S, T, D, H and Dh = D / H. */
export interface Dims {
  batch: number;
  seqLen: number;
  kvSeqLen: number;
  dModel: number;
  numHeads: number;
  headDim: number;
}

export function checkDims(fn: string, o: Record<string, unknown>, withKv: boolean): Dims {
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

/** What the length of q (and out) is made of, for messages: (B, S, D). */
export const qFormula = (d: Dims): string => `batch*seqLen*dModel = ${d.batch}*${d.seqLen}*${d.dModel}`;
/** The same for k and v: (B, T, D). */
export const kvFormula = (d: Dims): string => `batch*kvSeqLen*dModel = ${d.batch}*${d.kvSeqLen}*${d.dModel}`;
