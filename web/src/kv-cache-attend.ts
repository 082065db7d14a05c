// KVCache.attend (docs/spec.md Part 3, 4.6): its arguments checked in one fixed order (numHeads, the tensor
// dtype, k, v, q, the options, out), the new tokens' positions checked against the capacity and the rope
// tables, then q, k, v and out staged through the instance's StagingArena like the stateless call, the
// CacheAttendCallAbi struct written through call-abi.ts (operands and option fields) and one direct wasm call.
// Shapes: B = batch sequences, n new tokens, H query heads, Hkv KV heads, Dh head size, Dv value head size.
import { writeCacheOperands, writeOptionFields } from './call-abi.js';
import type { OptionValues } from './call-abi.js';
import { describe } from './describe.js';
import { halfResult } from './float16.js';
import { checkHalf, checkOperand, checkRopeStillUsable, checkStillUsable } from './heap-tensor.js';
import type { CacheCallHost, CacheConfig } from './kv-cache-config.js';
import type { AttentionState, KVCacheAttendOptions } from './kv-cache-types.js';
import type { MhaWasmModule } from './mha.js';
import { checkIntegerList } from './number-lists.js';
import {
  checkAlibiSlopes,
  checkCausal,
  checkEmptyRows,
  checkScale,
  checkSinks,
  checkSoftcap,
  checkTensorDType,
  checkWindow,
} from './option-checks.js';
import { checkRope, checkRopeRows } from './rope-options.js';
import { byteOffsetOf, copyResult, layout, place, stageRope, totalBytes, unfilledFloat32Array } from './staging.js';
import type { Operand } from './staging.js';
import { addTokens, checkRingWindow } from './kv-cache-sequences.js';
import type { CacheSequences } from './kv-cache-sequences.js';
import { checkStatus } from './status.js';
import type { Float16Tensor, HeapTensor } from './tensor-types.js';
import { checkDim, checkOptionsObject } from './validate.js';

const FN = 'KVCache.attend';
const ATTEND_KEYS = [
  'numHeads',
  'causal',
  'window',
  'softcap',
  'alibiSlopes',
  'scale',
  'emptyRows',
  'out',
  'sinks',
  'rope',
  'tensorDType',
  'dtype',
  'newTokens',
  'lse',
  'prefix',
] as const;

/** A checked shared prefix (docs/spec.md 5.2): its length Lp, and its id once no user code can run. */
export interface SharedPrefix {
  length: number;
  liveId: () => number;
}

/**
 * The element type of attend's tensors: `tensorDType`, or `dtype`, its deprecated alias (the name also
 * means the storage type in createKVCache). Both given and different is a TypeError naming both.
 */
export function checkAttendTensorDType(fn: string, o: Record<string, unknown>): 'float32' | 'float16' {
  // Each is read once (a getter runs once).
  const tensorDType = o.tensorDType;
  const alias = o.dtype;
  if (tensorDType !== undefined && alias !== undefined && tensorDType !== alias) {
    throw new TypeError(
      `${fn}: options: expected tensorDType or its deprecated alias dtype, or both the same, got tensorDType ` +
        `${describe(tensorDType)} and dtype ${describe(alias)}`,
    );
  }
  return tensorDType !== undefined ? checkTensorDType(fn, tensorDType, 'tensorDType') : checkTensorDType(fn, alias);
}

/** The checked tensors of one attend call: n, H, q, k, v and out (an address for a HeapTensor) and their lengths. */
interface AttendTensors {
  half: boolean;
  /** New tokens per sequence, from k's length. */
  n: number;
  numHeads: number;
  qIn: Operand;
  kIn: Operand;
  vIn: Operand;
  outIn: Operand | undefined;
  /** `out` as given (a HeapTensor's data is returned). */
  outValue: unknown;
  qLength: number;
  kvLength: number;
  vLength: number;
  outLength: number;
  /** lse: undefined (not asked for), 'new' (lse: true), or the Float32Array / HeapTensor address to write. */
  lseIn: Operand | 'new' | undefined;
  /** `lse` as given (read once: a getter runs once). */
  lseValue: unknown;
  lseLength: number;
}

/** The options of attend but out, resolved to what the call ABI takes. */
interface AttendOptions extends OptionValues {
  causal: boolean;
  scale: number;
  alibiSlopes: Float32Array | undefined;
  sinks: Float32Array | undefined;
  /** newTokens: the real rows of each sequence; undefined = n for every one. */
  counts: Int32Array | undefined;
  prefix: SharedPrefix | undefined;
}

/** numHeads, the tensor dtype, then k (which gives n), v and q. */
function checkAttendInputs(
  wasm: MhaWasmModule,
  c: CacheConfig,
  o: Record<string, unknown>,
  q: unknown,
  k: unknown,
  v: unknown,
): AttendTensors {
  const numHeads = checkDim(`${FN}: numHeads`, o.numHeads);
  if (numHeads % c.numKvHeads !== 0) {
    throw new RangeError(
      `${FN}: numHeads: expected a multiple of the cache's numKvHeads (${c.numKvHeads}), got ${numHeads}`,
    );
  }
  const half = checkAttendTensorDType(FN, o) === 'float16';
  const check = (name: string, value: unknown, expected: number, formula: () => string): Operand =>
    half
      ? checkHalf(`${FN}: ${name}`, value, expected, formula, 'tensorDType')
      : checkOperand(`${FN}: ${name}`, value, expected, formula, wasm, 'tensorDType');
  const Dv = c.valueDim;
  // n, the new tokens, comes from k's length: (B, n, Hkv*Dh).
  const kvRow = c.batch * c.numKvHeads * c.headDim;
  const kGiven = (k as { length?: unknown } | null)?.length;
  const n = typeof kGiven === 'number' && kGiven > 0 && kGiven % kvRow === 0 ? kGiven / kvRow : 1;
  const kvLength = n * kvRow;
  const kIn = check('k', k, kvLength, () => {
    return `batch*n*numKvHeads*headDim = ${c.batch}*n*${c.numKvHeads}*${c.headDim} for n >= 1 new tokens`;
  });
  const vLength = c.batch * n * c.numKvHeads * Dv;
  const vIn = check('v', v, vLength, () =>
    Dv === c.headDim
      ? `batch*n*numKvHeads*headDim = ${c.batch}*${n}*${c.numKvHeads}*${c.headDim}, the length of k`
      : `batch*n*numKvHeads*vHeadDim = ${c.batch}*${n}*${c.numKvHeads}*${Dv}, n = ${n} from k`,
  );
  const qLength = c.batch * n * numHeads * c.headDim;
  const qIn = check('q', q, qLength, () => {
    return `batch*n*numHeads*headDim = ${c.batch}*${n}*${numHeads}*${c.headDim} (n = ${n} new tokens, from k)`;
  });
  const outLength = c.batch * n * numHeads * Dv;
  return {
    half,
    n,
    numHeads,
    qIn,
    kIn,
    vIn,
    outIn: undefined,
    outValue: undefined,
    qLength,
    kvLength,
    vLength,
    outLength,
    lseIn: undefined,
    lseValue: undefined,
    lseLength: c.batch * numHeads * n,
  };
}

/** out: checked like q (its formula with Dv), and never one of the tensors the kernel reads. */
function checkAttendOut(wasm: MhaWasmModule, c: CacheConfig, t: AttendTensors, outValue: unknown): void {
  if (outValue === undefined) return;
  const { n, numHeads } = t;
  const Dv = c.valueDim;
  const formula = () =>
    Dv === c.headDim
      ? `batch*n*numHeads*headDim = ${c.batch}*${n}*${numHeads}*${c.headDim} (n = ${n} new tokens, from k)`
      : `batch*n*numHeads*vHeadDim = ${c.batch}*${n}*${numHeads}*${Dv} (n = ${n} new tokens, from k)`;
  const outIn = t.half
    ? checkHalf(`${FN}: out`, outValue, t.outLength, formula, 'tensorDType')
    : checkOperand(`${FN}: out`, outValue, t.outLength, formula, wasm, 'tensorDType');
  for (const [name, input] of [
    ['q', t.qIn],
    ['k', t.kIn],
    ['v', t.vIn],
  ] as const) {
    if (typeof outIn === 'number' && outIn === input) {
      throw new TypeError(
        `${FN}: out: expected a HeapTensor other than ${name} (the kernel reads ${name} while it writes out), got ` +
          `${name} itself`,
      );
    }
  }
  t.outIn = outIn;
  t.outValue = outValue;
}

/**
 * lse: true, or a float32 (B, H, n) Float32Array or HeapTensor that is none of the tensors the kernel reads
 * and does not overlap out (both are written).
 */
function checkAttendLse(wasm: MhaWasmModule, c: CacheConfig, t: AttendTensors, value: unknown): void {
  if (value === undefined) return;
  if (value === true) {
    t.lseIn = 'new';
    return;
  }
  const formula = () => `batch*numHeads*n = ${c.batch}*${t.numHeads}*${t.n} (n = ${t.n} new tokens, from k), or true`;
  const lseIn = checkOperand(`${FN}: lse`, value, t.lseLength, formula, wasm, 'tensorDType');
  for (const [name, input] of [
    ['q', t.qIn],
    ['k', t.kIn],
    ['v', t.vIn],
    ['out', t.outIn],
  ] as const) {
    if (typeof lseIn === 'number' && lseIn === input) {
      const why = name === 'out' ? 'both are written' : `the kernel reads ${name} while it writes lse`;
      throw new TypeError(`${FN}: lse: expected a HeapTensor other than ${name} (${why}), got ${name} itself`);
    }
  }
  const out = t.outIn;
  if (
    lseIn instanceof Float32Array &&
    (out instanceof Float32Array || out instanceof Uint16Array) &&
    out.buffer === lseIn.buffer &&
    out.byteOffset < lseIn.byteOffset + lseIn.byteLength &&
    lseIn.byteOffset < out.byteOffset + out.byteLength
  ) {
    throw new TypeError(
      `${FN}: lse: expected an array that does not overlap out (both are written), got one that shares its memory`,
    );
  }
  t.lseIn = lseIn;
  t.lseValue = value;
}

/** causal (default true), window, softcap, alibiSlopes, scale, emptyRows, sinks, rope, newTokens. */
function checkAttendOptions(
  c: CacheConfig,
  o: Record<string, unknown>,
  numHeads: number,
  n: number,
  checkPrefix: (value: unknown) => SharedPrefix,
): AttendOptions {
  const causal = checkCausal(FN, o.causal, true);
  const [windowLeft, windowRight] = checkWindow(FN, o.window);
  const softcap = checkSoftcap(FN, o.softcap);
  const alibiSlopes = checkAlibiSlopes(FN, o.alibiSlopes, { numHeads });
  const scale = checkScale(FN, o.scale, c.headDim);
  const emptyRows = checkEmptyRows(FN, o.emptyRows);
  const sinks = checkSinks(FN, o.sinks, { numHeads });
  const rope = checkRope(FN, o.rope, c.headDim);
  const newTokens = o.newTokens;
  const counts =
    newTokens === undefined
      ? undefined
      : checkIntegerList(
          `${FN}: newTokens`,
          newTokens,
          c.batch,
          () => n,
          `batch = ${c.batch} integers in [0, n = ${n}] (an Int32Array or an array)`,
        );
  const prefixValue = o.prefix;
  const prefix = prefixValue === undefined ? undefined : checkPrefix(prefixValue);
  return { causal, windowLeft, windowRight, softcap, alibiSlopes, scale, emptyRows, sinks, rope, counts, prefix };
}

/**
 * The positions [firstRow, ropeRows) that hold the call's tokens: sequence b's queries and new keys are at
 * [lengths[b], lengths[b] + n_b), so only the rows from the shortest old length to the longest new end are
 * staged. Throws (storing nothing) when a sequence would pass the capacity or the rope tables' rows.
 */
function checkRoom(
  c: CacheConfig,
  sequences: CacheSequences,
  n: number,
  a: AttendOptions,
): { firstRow: number; ropeRows: number } {
  const { lengths } = sequences;
  const count = (b: number) => (a.counts ? a.counts[b]! : n);
  if (c.ring) checkRingWindow(FN, c, sequences, n, a.windowLeft, count);
  let firstRow = Infinity;
  let ropeRows = 0;
  let longest = 0; // the sequence whose new end is ropeRows
  for (let b = 0; b < c.batch; b++) {
    if (!c.ring && lengths[b]! + count(b) > c.capacity) {
      const which = c.batch > 1 ? ` of sequence ${b}` : '';
      throw new RangeError(
        `${FN}: k: ${count(b)} new tokens${which} would pass the cache's capacity: length ${lengths[b]} + ` +
          `${count(b)} > capacity ${c.capacity} (nothing was stored; truncate() or a larger cache makes room)`,
      );
    }
    firstRow = Math.min(firstRow, lengths[b]!);
    if (lengths[b]! + count(b) > ropeRows) [ropeRows, longest] = [lengths[b]! + count(b), b];
  }
  ropeRows = Math.max(ropeRows, firstRow);
  // Over a prefix of Lp tokens, every position (and so every rope row) is Lp further on.
  const lp = a.prefix ? a.prefix.length : 0;
  if (a.rope) {
    const before = lp > 0 ? `prefix length + ` : '';
    const shown = lp > 0 ? `${lp} + ` : '';
    const why = () =>
      c.batch > 1
        ? `the last new token's of sequence ${longest}, ${before}lengths[${longest}] + n - 1 = ` +
          `${shown}${lengths[longest]} + ${count(longest)} - 1`
        : `the last new token's, ${before}length + n - 1 = ${shown}${lengths[0]} + ${n} - 1`;
    checkRopeRows(FN, a.rope, lp + ropeRows, why, 'nothing was stored');
  }
  return { firstRow: lp + firstRow, ropeRows: lp + ropeRows };
}

/**
 * Stages the call's operands and options, writes the call struct, calls the core and adds the new tokens
 * to the sequences' lengths and stored counts (at most `held`: a ring's capacity). Returns the heap address
 * of out's staging slot (or of the HeapTensor out) and out's byte offset, read before the staging malloc.
 */
function stageAndAttend(
  host: CacheCallHost,
  id: number,
  sequences: CacheSequences,
  held: number,
  t: AttendTensors,
  a: AttendOptions,
  rows: { firstRow: number; ropeRows: number },
): { outAt: number; outOffset: number; lseAt: number; lseOffset: number } {
  const { wasm, arena, cacheLayout: L } = host;
  const { qIn, kIn, vIn, outIn, qLength, kvLength, vLength, outLength, lseIn } = t;
  const { alibiSlopes, sinks, rope, counts } = a;
  const staged = (operand: Operand | undefined, length: number) => (typeof operand === 'number' ? 0 : length * 4);
  const ropeBytes = rope ? (rows.ropeRows - rows.firstRow) * rope.half * 4 : 0;
  const sizes = [
    staged(qIn, qLength),
    staged(kIn, kvLength),
    staged(vIn, vLength),
    staged(outIn, outLength),
    alibiSlopes ? alibiSlopes.byteLength : 0,
    sinks ? sinks.byteLength : 0,
    ropeBytes,
    ropeBytes,
    counts ? counts.byteLength : 0,
    typeof lseIn === 'number' || lseIn === undefined ? 0 : t.lseLength * 4,
  ];
  // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
  const qOffset = byteOffsetOf(qIn);
  const kOffset = byteOffsetOf(kIn);
  const vOffset = byteOffsetOf(vIn);
  const outOffset = byteOffsetOf(outIn);
  const lseOffset = lseIn === 'new' ? 0 : byteOffsetOf(lseIn);
  const base = arena.reserve(FN, totalBytes(sizes));
  const callAt = arena.callAt();
  const [qAt, kAt, vAt, outAt, alibiAt, sinksAt, cosAt, sinAt, countsAt, lseSlot] = layout(base, sizes);
  const heap = wasm.HEAPF32;
  const qAddress = place(wasm, qIn, qOffset, 0, qLength, qAt);
  const kAddress = place(wasm, kIn, kOffset, 0, kvLength, kAt);
  const vAddress = place(wasm, vIn, vOffset, 0, vLength, vAt);
  if (alibiSlopes) heap.set(alibiSlopes, alibiAt >>> 2);
  if (sinks) heap.set(sinks, sinksAt >>> 2);
  if (rope) stageRope(heap, rope, rows.firstRow, rows.ropeRows, cosAt, sinAt);
  if (counts) wasm.HEAP32.set(counts, countsAt >>> 2);
  const lseAt = typeof lseIn === 'number' ? lseIn : lseIn === undefined ? 0 : lseSlot;
  writeCacheOperands(wasm, L, callAt, {
    cache: id,
    q: qAddress,
    k: kAddress,
    v: vAddress,
    out: typeof outIn === 'number' ? outIn : outAt,
    lse: lseAt,
    newTokens: t.n,
    numHeads: t.numHeads,
    newTokenCounts: counts ? countsAt : 0,
    prefix: a.prefix ? a.prefix.liveId() : 0,
  });
  const alibi = alibiSlopes ? alibiAt : 0;
  const sink = sinks ? sinksAt : 0;
  writeOptionFields(
    wasm,
    L,
    callAt,
    a.causal,
    a.scale,
    a,
    alibi,
    sink,
    rope ? cosAt : 0,
    rope ? sinAt : 0,
    rows.ropeRows,
    rows.firstRow,
  );
  checkStatus(wasm, FN, wasm._mha_kv_cache_attend(callAt));
  addTokens(sequences, (b) => (counts ? counts[b]! : t.n), held);
  return { outAt, outOffset, lseAt, lseOffset };
}

/** The result of a call whose out was staged at `outAt` (or was a HeapTensor, written in place). */
function attendResult(wasm: MhaWasmModule, t: AttendTensors, outAt: number, outOffset: number, q: unknown) {
  const { half, outIn, outValue, outLength } = t;
  if (typeof outIn === 'number') return (outValue as HeapTensor).data;
  // The decode scratch may have grown memory: copyResult takes fresh views.
  const target = outIn ?? (half ? new Uint16Array(outLength) : unfilledFloat32Array(outLength));
  copyResult(wasm, target, outLength, outOffset, outAt, 0, outLength);
  if (target.length !== outLength) {
    // `out` viewed this heap and the staging malloc detached it: copyResult wrote where its elements are.
    return half
      ? new Uint16Array(wasm.HEAPU8.buffer, outOffset, outLength)
      : new Float32Array(wasm.HEAPF32.buffer, outOffset, outLength);
  }
  return half ? halfResult(outValue, target as Uint16Array, q) : (target as Float32Array);
}

/** The lse written at `lseAt`: copied into the Float32Array given, or a new one for `lse: true`. */
function lseResult(wasm: MhaWasmModule, t: AttendTensors, lseAt: number, lseOffset: number): Float32Array | undefined {
  const { lseIn, lseLength } = t;
  if (lseIn === 'new') return new Float32Array(wasm.HEAPF32.buffer, lseAt, lseLength).slice();
  if (!(lseIn instanceof Float32Array)) return undefined;
  copyResult(wasm, lseIn, lseLength, lseOffset, lseAt, 0, lseLength);
  return undefined;
}

/**
 * One attend of the cache of `config` whose per-sequence lengths and stored counts are `sequences` (updated
 * here). `liveId`
 * gives the C++ cache's id, or throws once it was freed: it is asked again after the last user code (the
 * option getters) has run, as are the tensors.
 */
export function attendCache(
  host: CacheCallHost,
  c: CacheConfig,
  sequences: CacheSequences,
  liveId: () => number,
  q: unknown,
  k: unknown,
  v: unknown,
  options: KVCacheAttendOptions,
  checkPrefix: (value: unknown) => SharedPrefix,
): Float32Array | Float16Tensor | AttentionState<Float32Array | Float16Tensor> {
  const { wasm } = host;
  const o = checkOptionsObject(`${FN}: options`, options, ATTEND_KEYS);
  const t = checkAttendInputs(wasm, c, o, q, k, v);
  const a = checkAttendOptions(c, o, t.numHeads, t.n, checkPrefix);
  checkAttendOut(wasm, c, t, o.out);
  checkAttendLse(wasm, c, t, o.lse);
  // Option getters are user code: the cache and the tensors are checked again once none can run.
  const id = liveId();
  checkStillUsable(`${FN}: q`, q, t.qIn, t.qLength);
  checkStillUsable(`${FN}: k`, k, t.kIn, t.kvLength);
  checkStillUsable(`${FN}: v`, v, t.vIn, t.vLength);
  if (t.outIn !== undefined) checkStillUsable(`${FN}: out`, t.outValue, t.outIn, t.outLength);
  if (t.lseIn !== undefined && t.lseIn !== 'new') checkStillUsable(`${FN}: lse`, t.lseValue, t.lseIn, t.lseLength);
  if (a.rope) checkRopeStillUsable(FN, a.rope);
  a.prefix?.liveId(); // a getter may have freed it
  const rows = checkRoom(c, sequences, t.n, a);
  const { outAt, outOffset, lseAt, lseOffset } = stageAndAttend(
    host,
    id,
    sequences,
    c.ring ? c.capacity : Infinity,
    t,
    a,
    rows,
  );
  const out = attendResult(wasm, t, outAt, outOffset, q);
  const lse = lseResult(wasm, t, lseAt, lseOffset);
  return lse !== undefined ? { out, lse } : out;
}
