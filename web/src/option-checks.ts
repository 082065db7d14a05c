// The options that multiHeadAttention, attentionWeights and KVCache.attend share (docs/spec.md Part 2,
// 4.2 to 4.4), each checked by one function here and resolved into the value the call ABI takes
// (call-abi.ts's writeOptionFields). The options only the stateless calls have are in
// attention-options.ts, rope in rope-options.ts.
import { describe } from './describe.js';
import { checkNumberList } from './number-lists.js';
import { describeList } from './validate.js';
import type { Dims } from './validate.js';

export function checkScale(fn: string, value: unknown, headDim: number): number {
  if (value === undefined) return Math.fround(1 / Math.sqrt(headDim));
  if (typeof value !== 'number') throw new TypeError(`${fn}: scale: expected a finite number, got ${describe(value)}`);
  if (!Number.isFinite(value)) throw new RangeError(`${fn}: scale: expected a finite number, got ${value}`);
  return value;
}

/** causal: a boolean; `fallback` when not given (false for the stateless calls, true for KVCache.attend). */
export function checkCausal(fn: string, value: unknown, fallback = false): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`${fn}: causal: expected a boolean, got ${describe(value)}`);
  return value;
}

export function checkAlibiSlopes(fn: string, value: unknown, d: Pick<Dims, 'numHeads'>): Float32Array | undefined {
  if (value === undefined) return undefined;
  return checkNumberList(
    `${fn}: alibiSlopes`,
    value,
    Float32Array,
    d.numHeads,
    `one per query head, numHeads = ${d.numHeads}`,
    'finite numbers',
    (x) => (Number.isFinite(Math.fround(x)) ? undefined : Number.isFinite(x) ? ' (beyond float32)' : ''),
  );
}

/** sinks (docs/spec.md 4.4): one finite float32 logit per query head, copied; undefined without sinks. */
export function checkSinks(fn: string, value: unknown, d: Pick<Dims, 'numHeads'>): Float32Array | undefined {
  if (value === undefined) return undefined;
  return checkNumberList(
    `${fn}: sinks`,
    value,
    Float32Array,
    d.numHeads,
    `one per query head, numHeads = ${d.numHeads}`,
    'finite numbers',
    (x) => (Number.isFinite(Math.fround(x)) ? undefined : Number.isFinite(x) ? ' (beyond float32)' : ''),
  );
}

/** stage of attentionWeights (docs/spec.md 4.3) as the ABI's number: 0 scaled, 1 softcapped, 2 biased, 3 softmax. */
export function checkStage(fn: string, value: unknown): number {
  if (value === undefined) return 3;
  const index = typeof value === 'string' ? ['scaled', 'softcapped', 'biased', 'softmax'].indexOf(value) : -1;
  if (index >= 0) return index;
  const message = `${fn}: stage: expected 'scaled', 'softcapped', 'biased' or 'softmax', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/**
 * The element type of multiHeadAttention's and KVCache.attend's tensors (docs/spec.md 4.2); `option` is
 * the option's name (KVCache.attend's is tensorDType, with dtype its alias).
 */
export function checkTensorDType(fn: string, value: unknown, option = 'dtype'): 'float32' | 'float16' {
  if (value === undefined || value === 'float32') return 'float32';
  if (value === 'float16') return 'float16';
  const message = `${fn}: ${option}: expected 'float32' or 'float16', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/** The window bounds for the ABI: -1 for Infinity, and for a bound no int32 position can reach. */
export function checkWindow(fn: string, value: unknown): [number, number] {
  if (value === undefined) return [-1, -1];
  const expected = '[left, right], two non-negative integers or Infinity';
  if (!Array.isArray(value)) throw new TypeError(`${fn}: window: expected ${expected}, got ${describe(value)}`);
  if (value.length !== 2) throw new RangeError(`${fn}: window: expected ${expected}, got ${describeList(value)}`);
  const bounds: number[] = [];
  for (const bound of [value[0], value[1]] as unknown[]) {
    if (typeof bound !== 'number')
      throw new TypeError(`${fn}: window: expected ${expected}, got ${describeList(value)}`);
    if (!(bound === Infinity || (Number.isInteger(bound) && bound >= 0))) {
      throw new RangeError(`${fn}: window: expected ${expected}, got ${describeList(value)}`);
    }
    bounds.push(bound >= 0x7fffffff ? -1 : bound);
  }
  return bounds as [number, number];
}

/** 0 = none; otherwise the cap as float32 (the ABI's type), which must stay finite and > 0. */
export function checkSoftcap(fn: string, value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number')
    throw new TypeError(`${fn}: softcap: expected a finite number > 0, got ${describe(value)}`);
  const cap = Math.fround(value);
  if (!(Number.isFinite(cap) && cap > 0)) {
    const range = Number.isFinite(value) && value > 0 ? ' in float32 range' : '';
    throw new RangeError(`${fn}: softcap: expected a finite number > 0${range}, got ${value}`);
  }
  return cap;
}

export function checkEmptyRows(fn: string, value: unknown): 0 | 1 {
  if (value === undefined || value === 'nan') return 0;
  if (value === 'zero') return 1;
  const message = `${fn}: emptyRows: expected 'nan' or 'zero', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}
