// The options of multiHeadAttention and attentionWeights: checked in one fixed order and resolved into
// what the call ABI (call-abi.ts) takes. Tensor arguments are checked by a function the caller passes,
// since the two functions accept different kinds (multiHeadAttention also takes heap tensors).
import { describe } from './describe.js';
import { checkDims, checkNotDetached, kvFormula, MAX_ELEMENTS, qFormula } from './validate.js';
import type { Dims } from './validate.js';

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

/** Checks one tensor argument (q, k or v) and returns what the call uses of it. */
export type TensorCheck<T> = (name: string, value: unknown, expected: number, formula: () => string) => T;

/** A checked attention call: its dims, tensor arguments, and options resolved to the values the core takes. */
export interface AttentionCall<T> {
  d: Dims;
  /** Elements of q and out (B, S, D), and of k and v (B, T, D). */
  qLength: number;
  kvLength: number;
  qIn: T;
  kIn: T;
  /** undefined for attentionWeights, which has no v. */
  vIn: T | undefined;
  mask: Uint8Array | undefined;
  causal: boolean;
  scale: number;
}

/**
 * What multiHeadAttention and attentionWeights both check, in this order: dims, q, k, v (when `withV`),
 * mask, causal and scale.
 */
export function checkAttentionCall<T>(fn: string, o: Record<string, unknown>, q: unknown, k: unknown, withV: boolean, v: unknown,
  check: TensorCheck<T>): AttentionCall<T> {
  const d = checkDims(fn, o, true);
  const qLength = d.batch * d.seqLen * d.dModel;
  const kvLength = d.batch * d.kvSeqLen * d.dModel;
  const qIn = check(`${fn}: q`, q, qLength, () => qFormula(d));
  const kIn = check(`${fn}: k`, k, kvLength, () => kvFormula(d));
  const vIn = withV ? check(`${fn}: v`, v, kvLength, () => kvFormula(d)) : undefined;
  const mask = checkMask(fn, o.mask, d);
  const causal = checkCausal(fn, o.causal);
  const scale = checkScale(fn, o.scale, d.headDim);
  return { d, qLength, kvLength, qIn, kIn, vIn, mask, causal, scale };
}
