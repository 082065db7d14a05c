// The options of multiHeadAttention and attentionWeights (docs/spec.md Parts 1 and 2): checked in one
// fixed order and resolved into the values the call ABI (call-abi.ts) takes. This module has the options
// only the stateless calls have (mask, queryOffset, kvLengths, bias, biasShape) and the order of all of
// them; option-checks.ts the options KVCache.attend shares, rope-options.ts rope. Tensor arguments are
// checked by functions the caller passes, since the two functions accept different kinds
// (multiHeadAttention also takes heap tensors for q, k and v).
import { describe } from './describe.js';
import { checkNumberList } from './number-lists.js';
import {
  checkAlibiSlopes,
  checkCausal,
  checkEmptyRows,
  checkScale,
  checkSinks,
  checkSoftcap,
  checkWindow,
} from './option-checks.js';
import { checkRope, checkRopeRows } from './rope-options.js';
import type { Rope } from './rope-options.js';
import { checkDims, checkNotDetached, describeList, kvFormula, MAX_ELEMENTS, qFormula, vFormula } from './validate.js';
import type { Dims } from './validate.js';

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

/** [bias_batch, bias_heads] of the ABI: the first two dims of biasShape (default [B, H, S, T]). */
function checkBiasShape(fn: string, value: unknown, d: Dims): [number, number] {
  if (value === undefined) return [d.batch, d.numHeads];
  const lengths = `seqLen (${d.seqLen}), kvSeqLen (${d.kvSeqLen})`;
  const expected = `[1 or batch (${d.batch}), 1 or numHeads (${d.numHeads}), ${lengths}]`;
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

/** bias and biasShape: the checked bias and the first two dims of its shape (1 and 1 without a bias). */
function checkBiasOption<Bias>(
  fn: string,
  biasIn: unknown,
  biasShapeIn: unknown,
  d: Dims,
  checkBias: TensorCheck<Bias>,
): { bias: Bias | undefined; biasBatch: number; biasHeads: number } {
  if (biasIn === undefined && biasShapeIn !== undefined) {
    throw new TypeError(
      `${fn}: biasShape: expected only together with bias, got biasShape ${describeList(biasShapeIn)} without bias`,
    );
  }
  if (biasIn === undefined) return { bias: undefined, biasBatch: 1, biasHeads: 1 };
  const [biasBatch, biasHeads] = checkBiasShape(fn, biasShapeIn, d);
  const length = biasBatch * biasHeads * d.seqLen * d.kvSeqLen;
  const formula = () =>
    `biasShape [${biasBatch}, ${biasHeads}, ${d.seqLen}, ${d.kvSeqLen}] = ` +
    `${biasBatch}*${biasHeads}*${d.seqLen}*${d.kvSeqLen}`;
  if (length >= MAX_ELEMENTS) {
    throw new RangeError(
      `${fn}: shape too large for a bias: ${formula()} = ${length} elements, expected fewer than 2^31`,
    );
  }
  return { bias: checkBias(`${fn}: bias`, biasIn, length, formula), biasBatch, biasHeads };
}

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
  const { bias, biasBatch, biasHeads } = checkBiasOption(fn, biasIn, biasShapeIn, d, checkBias);
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
