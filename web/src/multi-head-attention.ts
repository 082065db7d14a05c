// multiHeadAttention (docs/spec.md Parts 1 and 2): its arguments checked (attention-options.ts, and out
// and lse here), staged by batch groups through the instance's AttentionStaging (staging.ts), the call
// struct written (call-abi.ts) and one direct wasm call per group; on a thread pool a split call is
// pipelined (pipelinedGroups). Shapes: B batch, S query length, T key/value length, H heads, Dh head
// size, Dv value head size, D = H*Dh model size.
import { checkAttentionCall } from './attention-options.js';
import type { AttentionCall, TensorCheck } from './attention-options.js';
import { writeCallOperands, writeCallOptions } from './call-abi.js';
import type { CallLayout } from './call-abi.js';
import { halfResult } from './float16.js';
import { checkHalf, checkRopeStillUsable, checkStillUsable } from './heap-tensor.js';
import type { MhaWasmModule } from './mha.js';
import { checkTensorDType } from './option-checks.js';
import { byteOffsetOf, copyIn, copyResult, place, stageRope, unfilledFloat32Array } from './staging.js';
import type { AttentionStaging, Operand, StagingArena } from './staging.js';
import { checkStatus } from './status.js';
import type { Float16Tensor, HeapTensor } from './tensor-types.js';
import type { AttentionOptions, MHAInfo } from './types.js';
import { ATTENTION_KEYS, checkOptionsObject, outFormula } from './validate.js';

/** What the stateless calls need of their instance. */
export interface AttentionHost {
  readonly wasm: MhaWasmModule;
  readonly info: MHAInfo;
  readonly arena: StagingArena;
  readonly callLayout: CallLayout;
  /** The staging plan of multiHeadAttention, refilled by each call. */
  readonly staging: AttentionStaging;
  /** q, k, v, bias, out and lse: a Float32Array, or a heap tensor of this instance (its address). */
  readonly checkOperand: TensorCheck<Operand>;
}

/** The operands of one multiHeadAttention call and their per-item sizes, as its batch groups stage them. */
interface StagedCall {
  /** The call struct's address (taken after the staging allocation, which may move it). */
  callAt: number;
  qIn: Operand;
  kIn: Operand;
  vIn: Operand;
  outIn: Operand | undefined;
  lseIn: Operand | undefined;
  mask: Uint8Array | undefined;
  biasIn: Operand | undefined;
  /**
   * The array the result goes to (undefined for a HeapTensor out, written in place); a Uint16Array for dtype 'float16'.
   */
  target: Float32Array | Uint16Array | undefined;
  qOffset: number;
  kOffset: number;
  vOffset: number;
  outOffset: number;
  maskOffset: number;
  biasOffset: number;
  lseOffset: number;
  /** Elements (bytes for the mask) of one batch item. */
  qPer: number;
  kvPer: number;
  vPer: number;
  outPer: number;
  maskPer: number;
  lsePer: number;
  biasPer: number;
  outLength: number;
  lseLength: number;
  /** Address of a bias that every group reads whole (0: none, or the bias is sliced by group). */
  wholeBias: number;
  kvLengths: boolean;
}

/**
 * Copies the inputs of batch items [b0, b0 + items) into the group slots of staging set `set` (HeapTensors
 * are addressed in place) and writes their kernel call's operands into the call struct at `callAt`.
 */
function stageGroup(
  wasm: MhaWasmModule,
  L: CallLayout,
  callAt: number,
  plan: AttentionStaging,
  c: StagedCall,
  b0: number,
  items: number,
  set: number,
): void {
  const qAddress = place(wasm, c.qIn, c.qOffset, b0 * c.qPer, items * c.qPer, plan.qAt(set));
  const kAddress = plan.kIsQ ? qAddress : place(wasm, c.kIn, c.kOffset, b0 * c.kvPer, items * c.kvPer, plan.kAt(set));
  const vAddress = plan.vIsK
    ? kAddress
    : plan.vIsQ
      ? qAddress
      : place(wasm, c.vIn, c.vOffset, b0 * c.vPer, items * c.vPer, plan.vAt(set));
  if (c.mask) copyIn(wasm.HEAPU8, c.mask, c.maskOffset, b0 * c.maskPer, items * c.maskPer, plan.maskAt(set));
  const biasAddress = plan.biasSliced
    ? place(wasm, c.biasIn!, c.biasOffset, b0 * c.biasPer, items * c.biasPer, plan.biasAt(set))
    : c.wholeBias;
  const lse = c.lseIn;
  writeCallOperands(
    wasm,
    L,
    callAt,
    qAddress,
    kAddress,
    vAddress,
    typeof c.outIn === 'number' ? c.outIn + b0 * c.outPer * 4 : plan.outAt(set),
    c.mask ? plan.maskAt(set) : 0,
    biasAddress,
    plan.biasSliced ? items : 1,
    c.kvLengths ? plan.kvLengthsAt + b0 * 4 : 0,
    lse === undefined ? 0 : typeof lse === 'number' ? lse + b0 * c.lsePer * 4 : plan.lseAt(set),
    items,
  );
}

/** Copies the results of batch items [b0, b0 + items) from staging set `set` into the caller's arrays. */
function copyGroupOut(
  wasm: MhaWasmModule,
  plan: AttentionStaging,
  c: StagedCall,
  b0: number,
  items: number,
  set: number,
): void {
  // The kernel's scratch may have grown memory: fresh views.
  if (c.lseIn instanceof Float32Array) {
    copyResult(wasm, c.lseIn, c.lseLength, c.lseOffset, plan.lseAt(set), b0 * c.lsePer, items * c.lsePer);
  }
  if (c.target !== undefined)
    copyResult(wasm, c.target, c.outLength, c.outOffset, plan.outAt(set), b0 * c.outPer, items * c.outPer);
}

/** Throws when the heap tensor `output` (an address) is also q, k, v, the bias or (for lse) out. */
function refuseInputs(
  fn: string,
  outputName: string,
  output: number,
  call: AttentionCall<Operand, Operand>,
  out: Operand | undefined,
): void {
  refuseSameTensor(fn, outputName, output, 'q', call.qIn);
  refuseSameTensor(fn, outputName, output, 'k', call.kIn);
  refuseSameTensor(fn, outputName, output, 'v', call.vIn);
  refuseSameTensor(fn, outputName, output, 'bias', call.model.bias);
  refuseSameTensor(fn, outputName, output, 'out', out);
}

/** Throws unless the heap tensor `output` (an address) is another tensor than `input`. */
function refuseSameTensor(
  fn: string,
  outputName: string,
  output: number,
  name: string,
  input: Operand | undefined,
): void {
  if (input !== output) return;
  const why = name === 'out' ? 'both are written' : `the kernel reads ${name} while it writes ${outputName}`;
  throw new TypeError(`${fn}: ${outputName}: expected a HeapTensor other than ${name} (${why}), got ${name} itself`);
}

/**
 * The outputs of multiHeadAttention must not alias what the kernel reads while it writes them: a heap
 * tensor out or lse is not one of the input tensors, nor are out and lse one tensor; an lse array does
 * not overlap an out array (both are written). Distinct live tensors never overlap.
 */
function checkOutputsApart(
  fn: string,
  call: AttentionCall<Operand, Operand>,
  out: Operand | undefined,
  lse: Operand | undefined,
): void {
  if (typeof out === 'number') refuseInputs(fn, 'out', out, call, undefined);
  if (typeof lse === 'number') refuseInputs(fn, 'lse', lse, call, out);
  if (
    typeof out === 'object' &&
    lse instanceof Float32Array &&
    out.buffer === lse.buffer &&
    out.byteOffset < lse.byteOffset + lse.byteLength &&
    lse.byteOffset < out.byteOffset + out.byteLength
  ) {
    throw new TypeError(
      `${fn}: lse: expected an array that does not overlap out (both are written), got one that shares its memory`,
    );
  }
}

/** A checked multiHeadAttention call: the call and its outputs (a number is a HeapTensor's address). */
interface CheckedCall {
  call: AttentionCall<Operand, Operand>;
  half: boolean;
  outIn: Operand | undefined;
  /** `out` as given (a HeapTensor's data is returned). */
  outValue: unknown;
  lseIn: Operand | undefined;
  lseLength: number;
}

/** The arguments in the order of docs/spec.md: dtype, the call (attention-options.ts), out, lse. */
function checkCall(host: AttentionHost, fn: string, q: unknown, k: unknown, v: unknown, options: unknown): CheckedCall {
  const o = checkOptionsObject(`${fn}: options`, options, ATTENTION_KEYS);
  const half = checkTensorDType(fn, o.dtype) === 'float16';
  const check = half ? checkHalf : host.checkOperand;
  const call = checkAttentionCall(fn, o, q, k, true, v, check, host.checkOperand);
  const { d, qLength, kvLength, vLength, outLength, qIn, kIn, model } = call;
  const outValue = o.out;
  const outIn = outValue === undefined ? undefined : check(`${fn}: out`, outValue, outLength, () => outFormula(d));
  const lseValue = o.lse;
  const lseLength = d.batch * d.numHeads * d.seqLen;
  const lseIn =
    lseValue === undefined
      ? undefined
      : host.checkOperand(
          `${fn}: lse`,
          lseValue,
          lseLength,
          () => `batch*numHeads*seqLen = ${d.batch}*${d.numHeads}*${d.seqLen}`,
        );
  checkStillUsable(`${fn}: q`, q, qIn, qLength);
  checkStillUsable(`${fn}: k`, k, kIn, kvLength);
  checkStillUsable(`${fn}: v`, v, call.vIn!, vLength);
  if (model.bias !== undefined)
    checkStillUsable(`${fn}: bias`, model.biasGiven, model.bias, model.biasBatch * model.biasPerItem);
  if (model.rope) checkRopeStillUsable(fn, model.rope);
  checkOutputsApart(fn, call, outIn, lseIn);
  return { call, half, outIn, outValue, lseIn, lseLength };
}

/**
 * Reserves the staging of `sets` group sets (the call's only allocation), stages what every kernel call
 * reads whole and writes the call struct's dims and options; returns what the groups stage and copy.
 */
function stageCall(host: AttentionHost, fn: string, c: CheckedCall, sets: number): StagedCall {
  const { wasm, staging: plan } = host;
  const { call, half, outIn, lseIn } = c;
  const { d, outLength, mask, qIn, kIn, model } = call;
  const vIn = call.vIn!;
  const biasIn = model.bias;
  // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
  const qOffset = byteOffsetOf(qIn);
  const kOffset = byteOffsetOf(kIn);
  const vOffset = byteOffsetOf(vIn);
  const outOffset = byteOffsetOf(outIn);
  const maskOffset = byteOffsetOf(mask);
  const biasOffset = byteOffsetOf(biasIn);
  const lseOffset = byteOffsetOf(lseIn);
  // The only allocation of the call: it may grow (and so detach) memory, so views are taken after it.
  plan.layOut(host.arena.reserve(fn, plan.bytes(sets)), sets);
  const callAt = host.arena.callAt();
  const target =
    typeof outIn === 'number'
      ? undefined
      : (outIn ?? (half ? new Uint16Array(outLength) : unfilledFloat32Array(outLength)));
  // What every kernel call reads whole is staged once.
  const { kvLengthsAt, alibiSlopesAt, sinksAt, ropeCosAt, ropeSinAt } = plan;
  if (model.kvLengths) wasm.HEAP32.set(model.kvLengths, kvLengthsAt >>> 2);
  if (model.alibiSlopes) wasm.HEAPF32.set(model.alibiSlopes, alibiSlopesAt >>> 2);
  if (model.sinks) wasm.HEAPF32.set(model.sinks, sinksAt >>> 2);
  if (model.rope) stageRope(wasm.HEAPF32, model.rope, 0, model.ropeRows, ropeCosAt, ropeSinAt);
  const biasPer = model.biasPerItem;
  const wholeBias =
    biasIn === undefined || plan.biasSliced ? 0 : place(wasm, biasIn, biasOffset, 0, biasPer, plan.biasAt(0));
  const alibi = model.alibiSlopes ? alibiSlopesAt : 0;
  const sinks = model.sinks ? sinksAt : 0;
  writeCallOptions(
    wasm,
    host.callLayout,
    callAt,
    call,
    alibi,
    sinks,
    model.rope ? ropeCosAt : 0,
    model.rope ? ropeSinAt : 0,
  );
  return {
    callAt,
    qIn,
    kIn,
    vIn,
    outIn,
    lseIn,
    mask,
    biasIn,
    target,
    qOffset,
    kOffset,
    vOffset,
    outOffset,
    maskOffset,
    biasOffset,
    lseOffset,
    qPer: d.seqLen * d.dModel,
    kvPer: d.kvSeqLen * d.kvDModel,
    vPer: d.kvSeqLen * d.vDModel,
    outPer: d.seqLen * d.outDModel,
    maskPer: d.seqLen * d.kvSeqLen,
    lsePer: d.numHeads * d.seqLen,
    biasPer,
    outLength,
    lseLength: c.lseLength,
    wholeBias,
    kvLengths: model.kvLengths !== undefined,
  };
}

/** multiHeadAttention of the instance `host` (the MHA method). */
export function multiHeadAttention(
  host: AttentionHost,
  q: unknown,
  k: unknown,
  v: unknown,
  options: AttentionOptions,
): Float32Array | Float16Tensor {
  const fn = 'multiHeadAttention';
  const c = checkCall(host, fn, q, k, v, options);
  const { wasm, staging: plan } = host;
  const batch = c.call.d.batch;
  plan.plan(wasm, c.call, c.outIn, c.lseIn);
  const group = plan.group;
  // A split call on a pool is pipelined (pipelinedGroups): a single thread would only reorder its copies.
  const pipelined = group < batch && host.info.threads > 1;
  const staged = stageCall(host, fn, c, pipelined ? 2 : 1);
  const callAt = staged.callAt;
  if (pipelined) {
    pipelinedGroups(host, fn, staged, batch, callAt);
  } else {
    // One group at a time, all in staging set 0: the same staging and copies as the pipeline's.
    for (let b0 = 0; b0 < batch; b0 += group) {
      const items = Math.min(group, batch - b0);
      stageGroup(wasm, host.callLayout, callAt, plan, staged, b0, items, 0);
      checkStatus(wasm, fn, wasm._mha_attention(callAt));
      copyGroupOut(wasm, plan, staged, b0, items, 0);
    }
  }
  const { target, outLength, outOffset } = staged;
  // `out` was a view of this heap that the call's malloc detached (see copyIn; such a call is never split):
  // copyGroupOut wrote the same elements; hand back a view of them in the current memory.
  if (target !== undefined && target.length !== outLength) {
    return c.half
      ? new Uint16Array(wasm.HEAPU8.buffer, outOffset, outLength)
      : new Float32Array(wasm.HEAPF32.buffer, outOffset, outLength);
  }
  if (c.half) return halfResult(c.outValue, target as Uint16Array, q);
  return (target as Float32Array | undefined) ?? (c.outValue as HeapTensor).data;
}

/**
 * The kernel calls of a split call on a thread pool, group g staged in set g % 2. Two groups are pending
 * on the pool at a time (mha_attention_begin returns once the workers have one; a second begin queues
 * the next): the calling thread joins the oldest group (mha_attention_join: it takes that group's units
 * left, then the next group's while the workers finish their last units of it, so no thread waits at
 * a group boundary), copies its result out and stages group g + 2 into the set it frees, while the
 * workers compute group g + 1. The calling thread's copies of one group so overlap the computation of
 * another, instead of keeping the workers waiting (bert-b8 on 2 threads: about 2.3 ms of copies a call).
 * Each group is computed exactly as without the pipeline: the same bits. A group's result is copied out
 * before anything is staged into its set again, and after its own inputs were staged, so an out that is
 * also an input (the same range) is still read before it is written.
 */
function pipelinedGroups(host: AttentionHost, fn: string, c: StagedCall, batch: number, callAt: number): void {
  const { wasm, callLayout: L, staging: plan } = host;
  const group = plan.group;
  const groups = Math.ceil(batch / group);
  const items = (g: number) => Math.min(group, batch - g * group);
  let pending = 0;
  const begin = (g: number) => {
    stageGroup(wasm, L, callAt, plan, c, g * group, items(g), g % 2);
    checkStatus(wasm, fn, wasm._mha_attention_begin(callAt));
    pending++; // a refused begin leaves nothing to join
  };
  try {
    begin(0);
    if (groups > 1) begin(1);
    for (let g = 0; g < groups; g++) {
      wasm._mha_attention_join();
      pending--;
      copyGroupOut(wasm, plan, c, g * group, items(g), g % 2);
      if (g + 2 < groups) begin(g + 2);
    }
  } catch (error) {
    // Nothing may compute on the staging once the call has returned.
    for (; pending > 0; pending--) wasm._mha_attention_join();
    throw error;
  }
}
