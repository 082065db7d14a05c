// The options of multiHeadAttention and attentionWeights (docs/spec.md Parts 1 and 2): checked in one
// fixed order and resolved into the values the call ABI (call-abi.ts) takes. Arrays of numbers are read
// once, here, into typed arrays of their own, so no user code runs while a call is staged. Tensor
// arguments are checked by functions the caller passes, since the two functions accept different kinds
// (multiHeadAttention also takes heap tensors for q, k and v).
import { describe } from './describe.js';
import {
  checkDims,
  checkNotDetached,
  checkOptionsObject,
  describeList,
  kvFormula,
  MAX_ELEMENTS,
  qFormula,
  vFormula,
} from './validate.js';
import type { Dims } from './validate.js';

export function checkScale(fn: string, value: unknown, headDim: number): number {
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
    throw new RangeError(
      `${fn}: shape too large for a mask: ${formula} = ${expected} elements, expected fewer than 2^31 ` +
        '(without a mask, or with causal: true, there is no such limit)',
    );
  }
  if (!(value instanceof Uint8Array) && !Array.isArray(value)) {
    throw new TypeError(
      `${fn}: mask: expected Uint8Array or boolean[] of length ${expected} (${formula}), got ${describe(value)}`,
    );
  }
  if (value instanceof Uint8Array && !ArrayBuffer.isView(value)) {
    throw new TypeError(
      `${fn}: mask: expected a Uint8Array, got an object that only inherits from Uint8Array (e.g. a Proxy)`,
    );
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

/** Positions are int32 in the core: query row i is at queryOffset + i < 2^31. */
function checkQueryOffset(fn: string, value: unknown, d: Dims): number {
  if (value === undefined) return 0;
  const expected = `a non-negative integer (with queryOffset + seqLen below 2^31)`;
  if (typeof value !== 'number')
    throw new TypeError(`${fn}: queryOffset: expected ${expected}, got ${describe(value)}`);
  if (!Number.isInteger(value) || value < 0 || value + d.seqLen > 0x7fffffff) {
    throw new RangeError(`${fn}: queryOffset: expected ${expected}, got ${value}`);
  }
  return value;
}

/**
 * A number[] or the typed array `Typed` of exactly `length` entries, each accepted by `entry` (which
 * returns what is wrong with it, or undefined), copied into a new `Typed` array. `what` is the expected
 * value, `why` how the length is made (both for messages).
 */
function checkNumberList<A extends Int32Array | Float32Array>(
  name: string,
  value: unknown,
  Typed: { new (length: number): A; name: string },
  length: number,
  why: string,
  what: string,
  entry: (x: number) => string | undefined,
): A {
  const expected = `${Typed.name} or number[] of ${length} ${what} (${why})`;
  if (!(value instanceof Typed) && !Array.isArray(value))
    throw new TypeError(`${name}: expected ${expected}, got ${describe(value)}`);
  if (value instanceof Typed) {
    if (!ArrayBuffer.isView(value)) {
      const article = /^[AEIOU]/.test(Typed.name) ? 'an' : 'a';
      throw new TypeError(
        `${name}: expected ${article} ${Typed.name}, got an object that only inherits from ${Typed.name} (e.g. a Proxy)`,
      );
    }
    checkNotDetached(name, value);
  }
  const list = value as ArrayLike<unknown>;
  if (list.length !== length) throw new RangeError(`${name}: expected ${expected}, got length ${list.length}`);
  const copy = new Typed(length);
  for (let i = 0; i < length; i++) {
    const x: unknown = list[i];
    if (typeof x !== 'number') throw new TypeError(`${name}: expected ${what}, got ${describe(x)} at index ${i}`);
    const problem = entry(x);
    if (problem !== undefined) throw new RangeError(`${name}: expected ${what}, got ${x} at index ${i}${problem}`);
    copy[i] = x;
  }
  return copy;
}

function checkKvLengths(fn: string, value: unknown, d: Dims): Int32Array | undefined {
  if (value === undefined) return undefined;
  return checkNumberList(
    `${fn}: kvLengths`,
    value,
    Int32Array,
    d.batch,
    `one per batch item, batch = ${d.batch}`,
    `integers in [0, kvSeqLen = ${d.kvSeqLen}]`,
    (x) => (Number.isInteger(x) && x >= 0 && x <= d.kvSeqLen ? undefined : ''),
  );
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

export const ROPE_KEYS = ['cos', 'sin', 'rotaryDim', 'interleaved'] as const;

/** Checked rope tables (docs/spec.md 4.5): `positions` = P rows of `half` = rotaryDim / 2 entries each. */
export interface Rope {
  cos: Float32Array;
  sin: Float32Array;
  rotaryDim: number;
  interleaved: boolean;
  positions: number;
  half: number;
}

/**
 * rope: `{ cos, sin, rotaryDim = headDim, interleaved = false }`, the tables Float32Arrays of one length,
 * a multiple of rotaryDim / 2. The positions the call needs are checked by its caller (ropeRows).
 */
export function checkRope(fn: string, value: unknown, headDim: number): Rope | undefined {
  if (value === undefined) return undefined;
  const name = `${fn}: rope`;
  const o = checkOptionsObject(name, value, ROPE_KEYS);
  const { cos, sin, rotaryDim: dimIn, interleaved: interleavedIn } = o;
  const expectedDim = `an even integer in [2, headDim = ${headDim}]`;
  let rotaryDim = headDim;
  if (dimIn !== undefined) {
    if (typeof dimIn !== 'number')
      throw new TypeError(`${name}: rotaryDim: expected ${expectedDim}, got ${describe(dimIn)}`);
    rotaryDim = dimIn;
  }
  if (!Number.isInteger(rotaryDim) || rotaryDim < 2 || rotaryDim > headDim || rotaryDim % 2 !== 0) {
    throw new RangeError(
      `${name}: rotaryDim: expected ${expectedDim}, got ${rotaryDim}${dimIn === undefined ? ' (the default, headDim)' : ''}`,
    );
  }
  if (interleavedIn !== undefined && typeof interleavedIn !== 'boolean') {
    throw new TypeError(`${name}: interleaved: expected a boolean, got ${describe(interleavedIn)}`);
  }
  const half = rotaryDim / 2;
  const tables: Float32Array[] = [];
  for (const [key, table] of [
    ['cos', cos],
    ['sin', sin],
  ] as const) {
    const expected = `a Float32Array of (positions, rotaryDim / 2 = ${half}) entries, e.g. from ropeTables()`;
    if (!(table instanceof Float32Array))
      throw new TypeError(`${name}: ${key}: expected ${expected}, got ${describe(table)}`);
    if (!ArrayBuffer.isView(table)) {
      throw new TypeError(
        `${name}: ${key}: expected a Float32Array, got an object that only inherits from Float32Array (e.g. a Proxy)`,
      );
    }
    checkNotDetached(`${name}: ${key}`, table);
    if (table.length === 0 || table.length % half !== 0) {
      throw new RangeError(
        `${name}: ${key}: expected a length that is a positive multiple of rotaryDim / 2 = ${half}, got length ${table.length}`,
      );
    }
    tables.push(table);
  }
  const [cosTable, sinTable] = tables as [Float32Array, Float32Array];
  if (cosTable.length !== sinTable.length) {
    throw new RangeError(
      `${name}: sin: expected the length of cos (${cosTable.length}), got length ${sinTable.length}`,
    );
  }
  return {
    cos: cosTable,
    sin: sinTable,
    rotaryDim,
    interleaved: interleavedIn === true,
    positions: cosTable.length / half,
    half,
  };
}

/** Throws the RangeError of a call whose positions reach `needed` - 1 when the rope tables have fewer rows. */
export function checkRopeRows(
  fn: string,
  rope: Rope,
  needed: number,
  why: () => string,
  nothing = 'nothing was computed',
): void {
  if (needed > rope.positions) {
    throw new RangeError(
      `${fn}: rope: position ${needed - 1} (${why()}) is past the tables' ${rope.positions} rows ` +
        `(cos.length / (rotaryDim / 2) = ${rope.cos.length} / ${rope.half}); ${nothing}`,
    );
  }
}

/** stage of attentionWeights (docs/spec.md 4.3) as the ABI's number: 0 scaled, 1 softcapped, 2 biased, 3 softmax. */
export function checkStage(fn: string, value: unknown): number {
  if (value === undefined) return 3;
  const index = typeof value === 'string' ? ['scaled', 'softcapped', 'biased', 'softmax'].indexOf(value) : -1;
  if (index >= 0) return index;
  const message = `${fn}: stage: expected 'scaled', 'softcapped', 'biased' or 'softmax', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/** dtype of multiHeadAttention and KVCache.attend's tensors (docs/spec.md 4.2). */
export function checkTensorDType(fn: string, value: unknown): 'float32' | 'float16' {
  if (value === undefined || value === 'float32') return 'float32';
  if (value === 'float16') return 'float16';
  const message = `${fn}: dtype: expected 'float32' or 'float16', got ${describe(value)}`;
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
    throw new RangeError(
      `${fn}: softcap: expected a finite number > 0${Number.isFinite(value) && value > 0 ? ' in float32 range' : ''}, got ${value}`,
    );
  }
  return cap;
}

export function checkEmptyRows(fn: string, value: unknown): 0 | 1 {
  if (value === undefined || value === 'nan') return 0;
  if (value === 'zero') return 1;
  const message = `${fn}: emptyRows: expected 'nan' or 'zero', got ${describe(value)}`;
  throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
}

/** [bias_batch, bias_heads] of the ABI: the first two dims of biasShape (default [B, H, S, T]). */
function checkBiasShape(fn: string, value: unknown, d: Dims): [number, number] {
  if (value === undefined) return [d.batch, d.numHeads];
  const expected = `[1 or batch (${d.batch}), 1 or numHeads (${d.numHeads}), seqLen (${d.seqLen}), kvSeqLen (${d.kvSeqLen})]`;
  if (!Array.isArray(value)) throw new TypeError(`${fn}: biasShape: expected ${expected}, got ${describe(value)}`);
  const dims = Array.from({ length: value.length }, (_, i): unknown => value[i]);
  if (dims.some((dim) => typeof dim !== 'number'))
    throw new TypeError(`${fn}: biasShape: expected ${expected}, got ${describeList(dims)}`);
  const [b, h, s, t] = dims as number[];
  if (
    dims.length !== 4 ||
    (b !== 1 && b !== d.batch) ||
    (h !== 1 && h !== d.numHeads) ||
    s !== d.seqLen ||
    t !== d.kvSeqLen
  ) {
    throw new RangeError(`${fn}: biasShape: expected ${expected}, got ${describeList(dims)}`);
  }
  return [b!, h!];
}

/** Checks one tensor argument (q, k, v or bias) and returns what the call uses of it. */
export type TensorCheck<T> = (name: string, value: unknown, expected: number, formula: () => string) => T;

/** The options of docs/spec.md Part 2 but numKvHeads (a dim), resolved to the values of the call ABI. */
export interface ModelOptions<Bias> {
  queryOffset: number;
  kvLengths: Int32Array | undefined;
  /** -1 = unbounded. */
  windowLeft: number;
  windowRight: number;
  /** 0 = none. */
  softcap: number;
  alibiSlopes: Float32Array | undefined;
  bias: Bias | undefined;
  /** The bias as given (a Float32Array or a HeapTensor), to check again once no user code can run. */
  biasGiven: unknown;
  /** The first two dims of biasShape (1 = broadcast); 1 without a bias. */
  biasBatch: number;
  biasHeads: number;
  /** Elements of the bias per batch item of biasShape: biasHeads·S·T; 0 without a bias. */
  biasPerItem: number;
  /** 0 = 'nan', 1 = 'zero'. */
  emptyRows: 0 | 1;
  sinks: Float32Array | undefined;
  rope: Rope | undefined;
  /** Rows of the rope tables the call reads (positions [0, ropeRows)); 0 without rope. */
  ropeRows: number;
}

/** A call that sets none of them: one shared object, so such a call allocates none. */
const NO_MODEL_OPTIONS: ModelOptions<never> = Object.freeze({
  queryOffset: 0,
  kvLengths: undefined,
  windowLeft: -1,
  windowRight: -1,
  softcap: 0,
  alibiSlopes: undefined,
  bias: undefined,
  biasGiven: undefined,
  biasBatch: 1,
  biasHeads: 1,
  biasPerItem: 0,
  emptyRows: 0,
  sinks: undefined,
  rope: undefined,
  ropeRows: 0,
});

/**
 * Checks them in this order: queryOffset, kvLengths, window, softcap, alibiSlopes, sinks, rope, biasShape and
 * bias, emptyRows.
 */
function checkModelOptions<Bias>(
  fn: string,
  o: Record<string, unknown>,
  d: Dims,
  checkBias: TensorCheck<Bias>,
): ModelOptions<Bias> {
  // Each option is read once (a getter runs once), before any is checked.
  const {
    queryOffset: offsetIn,
    kvLengths: lengthsIn,
    window: windowIn,
    softcap: capIn,
    alibiSlopes: slopesIn,
    bias: biasIn,
    biasShape: biasShapeIn,
    emptyRows: emptyIn,
    sinks: sinksIn,
    rope: ropeIn,
  } = o;
  if (
    offsetIn === undefined &&
    lengthsIn === undefined &&
    windowIn === undefined &&
    capIn === undefined &&
    slopesIn === undefined &&
    biasIn === undefined &&
    biasShapeIn === undefined &&
    emptyIn === undefined &&
    sinksIn === undefined &&
    ropeIn === undefined
  ) {
    return NO_MODEL_OPTIONS;
  }
  const queryOffset = checkQueryOffset(fn, offsetIn, d);
  const kvLengths = checkKvLengths(fn, lengthsIn, d);
  const [windowLeft, windowRight] = checkWindow(fn, windowIn);
  const softcap = checkSoftcap(fn, capIn);
  const alibiSlopes = checkAlibiSlopes(fn, slopesIn, d);
  const sinks = checkSinks(fn, sinksIn, d);
  const rope = checkRope(fn, ropeIn, d.headDim);
  // Query row i is at position queryOffset + i, key j at j: the rows [0, ropeRows) are read.
  const ropeRows = rope === undefined ? 0 : Math.max(queryOffset + d.seqLen, d.kvSeqLen);
  if (rope !== undefined) {
    checkRopeRows(fn, rope, ropeRows, () =>
      queryOffset + d.seqLen >= d.kvSeqLen
        ? `the last query row's, queryOffset + seqLen - 1 = ${queryOffset} + ${d.seqLen} - 1`
        : `the last key's, kvSeqLen - 1 = ${d.kvSeqLen} - 1`,
    );
  }
  if (biasIn === undefined && biasShapeIn !== undefined) {
    throw new TypeError(
      `${fn}: biasShape: expected only together with bias, got biasShape ${describeList(biasShapeIn)} without bias`,
    );
  }
  let bias: Bias | undefined;
  let [biasBatch, biasHeads] = [1, 1];
  if (biasIn !== undefined) {
    [biasBatch, biasHeads] = checkBiasShape(fn, biasShapeIn, d);
    const length = biasBatch * biasHeads * d.seqLen * d.kvSeqLen;
    const formula = () =>
      `biasShape [${biasBatch}, ${biasHeads}, ${d.seqLen}, ${d.kvSeqLen}] = ${biasBatch}*${biasHeads}*${d.seqLen}*${d.kvSeqLen}`;
    if (length >= MAX_ELEMENTS) {
      throw new RangeError(
        `${fn}: shape too large for a bias: ${formula()} = ${length} elements, expected fewer than 2^31`,
      );
    }
    bias = checkBias(`${fn}: bias`, biasIn, length, formula);
  }
  const emptyRows = checkEmptyRows(fn, emptyIn);
  return {
    queryOffset,
    kvLengths,
    windowLeft,
    windowRight,
    softcap,
    alibiSlopes,
    bias,
    biasGiven: biasIn,
    biasBatch,
    biasHeads,
    biasPerItem: bias === undefined ? 0 : biasHeads * d.seqLen * d.kvSeqLen,
    emptyRows,
    sinks,
    rope,
    ropeRows,
  };
}

/** A checked attention call: its dims, tensor arguments, and options resolved to the values the core takes. */
export interface AttentionCall<T, Bias> {
  d: Dims;
  /** Elements of q (B, S, D), of k (B, T, Hkv·Dh), of v (B, T, Hkv·Dv) and of out (B, S, H·Dv). */
  qLength: number;
  kvLength: number;
  vLength: number;
  outLength: number;
  qIn: T;
  kIn: T;
  /** undefined for attentionWeights, which has no v. */
  vIn: T | undefined;
  mask: Uint8Array | undefined;
  causal: boolean;
  scale: number;
  model: ModelOptions<Bias>;
}

/**
 * What multiHeadAttention and attentionWeights both check, in this order: dims (numKvHeads included),
 * q, k, v (when `withV`), mask, causal, scale, then the model options (checkModelOptions).
 */
export function checkAttentionCall<T, Bias>(
  fn: string,
  o: Record<string, unknown>,
  q: unknown,
  k: unknown,
  withV: boolean,
  v: unknown,
  check: TensorCheck<T>,
  checkBias: TensorCheck<Bias>,
): AttentionCall<T, Bias> {
  const d = checkDims(fn, o, true);
  const qLength = d.batch * d.seqLen * d.dModel;
  const kvLength = d.batch * d.kvSeqLen * d.kvDModel;
  const qIn = check(`${fn}: q`, q, qLength, () => qFormula(d));
  const kIn = check(`${fn}: k`, k, kvLength, () => kvFormula(d));
  const vLength = d.batch * d.kvSeqLen * d.vDModel;
  const outLength = d.batch * d.seqLen * d.outDModel;
  const vIn = withV ? check(`${fn}: v`, v, vLength, () => vFormula(d)) : undefined;
  const mask = checkMask(fn, o.mask, d);
  const causal = checkCausal(fn, o.causal);
  const scale = checkScale(fn, o.scale, d.headDim);
  const model = checkModelOptions(fn, o, d, checkBias);
  return { d, qLength, kvLength, vLength, outLength, qIn, kIn, vIn, mask, causal, scale, model };
}
