// The MHA instance: one started wasm module, its staging arena and its heap tensors. Each method checks
// its arguments (validate.ts, attention-options.ts, heap-tensor.ts), stages them (staging.ts), writes the
// call struct (call-abi.ts), makes one direct wasm call and copies the result out.
import { checkAttentionCall, checkStage, checkTensorDType } from './attention-options.js';
import type { AttentionCall, TensorCheck } from './attention-options.js';
import { readCacheCallLayout, writeCallOperands, writeCallOptions } from './call-abi.js';
import type { CacheCallLayout, CallLayout } from './call-abi.js';
import { halfResult } from './float16.js';
import {
  checkArrayOnly,
  checkHalf,
  checkOperand,
  checkRopeStillUsable,
  checkStillUsable,
  MallocedTensor,
} from './heap-tensor.js';
import type { MhaWasmModule } from './mha.js';
import { ropeTables } from './rope.js';
import type { RopeTables, RopeTablesOptions } from './rope.js';
import {
  align16,
  AttentionStaging,
  byteOffsetOf,
  copyIn,
  copyOut,
  copyResult,
  layout,
  MALLOC_SLACK_FOR_16,
  place,
  stageRope,
  StagingArena,
  totalBytes,
  unfilledFloat32Array,
} from './staging.js';
import type { Operand } from './staging.js';
import { checkCacheOptions, createCache, WasmKVCache } from './kv-cache.js';
import type { CacheHost } from './kv-cache.js';
import { checkStatus } from './status.js';
import { loadCache } from './cache-io.js';
import type { KVCache, KVCacheOptions, LoadKVCacheOptions } from './kv-cache-types.js';
import type { AttentionOptions, AttentionWeightsOptions, BuildName, HeadShape, MHA, MHAInfo } from './types.js';
import type { Float16Tensor, HeapTensor, TensorDType, TensorIn, TensorOut } from './tensor-types.js';
import {
  ATTENTION_KEYS,
  checkDim,
  checkDims,
  checkOptionsObject,
  HEAD_KEYS,
  MAX_ELEMENTS,
  outFormula,
  qFormula,
  WEIGHTS_KEYS,
} from './validate.js';

/** The operands of one multiHeadAttention call and their per-item sizes, as its batch groups stage them. */
interface StagedCall {
  qIn: Operand;
  kIn: Operand;
  vIn: Operand;
  outIn: Operand | undefined;
  lseIn: Operand | undefined;
  mask: Uint8Array | undefined;
  biasIn: Operand | undefined;
  /** The array the result goes to (undefined for a HeapTensor out, written in place); a Uint16Array for dtype 'float16'. */
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

/**
 * attentionWeights returns its weights from float32 q and k: `out` and `lse` (outputs), `vHeadDim` (it has no
 * v) and `dtype` are options of multiHeadAttention, refused by name.
 */
function checkNoOutputs(fn: string, options: unknown): void {
  if (typeof options !== 'object' || options === null) return;
  for (const key of ['out', 'lse'] as const) {
    if ((options as Record<string, unknown>)[key] !== undefined) {
      throw new TypeError(
        `${fn}: options: unknown option "${key}": attentionWeights returns a new (batch, numHeads, seqLen, ` +
          `kvSeqLen) array of weights; out and lse are outputs of multiHeadAttention`,
      );
    }
  }
  if ((options as Record<string, unknown>).vHeadDim !== undefined) {
    throw new TypeError(
      `${fn}: options: unknown option "vHeadDim": attentionWeights has no v, and its weights do not depend on ` +
        'the value head size; vHeadDim is an option of multiHeadAttention and createKVCache',
    );
  }
  if ((options as Record<string, unknown>).dtype !== undefined) {
    throw new TypeError(
      `${fn}: options: unknown option "dtype": attentionWeights takes float32 q and k (Float32Array) and ` +
        "returns float32 weights; dtype: 'float16' is an option of multiHeadAttention and KVCache.attend",
    );
  }
}

/** The MHA of the public API, backed by one instance of a wasm build. */
export class WasmMHA implements MHA, CacheHost {
  // Replaced (not mutated) when dispose() ends the pool, so a caller's copy stays a true snapshot.
  private currentInfo: MHAInfo;
  readonly arena: StagingArena;
  /** Live KV caches of this instance, freed by dispose(). */
  readonly caches = new Set<WasmKVCache>();
  /** The layout of the KV cache's call struct, or why the module's does not match. */
  private readonly cacheCallLayout: CacheCallLayout | string;
  /** Whether the cache registry's ids got this instance's random base yet. */
  private cacheIdsSeeded = false;
  /** The staging plan of multiHeadAttention, refilled by each call. */
  private readonly staging = new AttentionStaging();
  /** Live tensors of this instance, freed by dispose(). */
  private readonly tensors = new Set<MallocedTensor>();
  /** q, k, v, bias, out and lse: a Float32Array, or a heap tensor of this instance (its address). */
  private readonly checkOperand: TensorCheck<Operand>;
  /** q, k, v and out of dtype 'float16': the bits of a Uint16Array or Float16Array. */
  private readonly checkHalfOperand: TensorCheck<Operand> = checkHalf;

  constructor(
    readonly wasm: MhaWasmModule,
    private readonly callLayout: CallLayout,
    build: BuildName,
    threads: number,
  ) {
    this.cacheCallLayout = readCacheCallLayout(wasm);
    const cacheCallBytes = typeof this.cacheCallLayout === 'string' ? 0 : this.cacheCallLayout.bytes;
    // One call-struct slot serves both structs (a call writes one of them).
    this.arena = new StagingArena(wasm, Math.max(callLayout.bytes, cacheCallBytes));
    this.currentInfo = Object.freeze({ version: wasm.version(), simd: wasm.simd(), threads, build });
    this.checkOperand = (name, value, expected, formula) => checkOperand(name, value, expected, formula, wasm);
  }

  get info(): MHAInfo {
    return this.currentInfo;
  }

  ropeTables(options: RopeTablesOptions): RopeTables {
    return ropeTables(options);
  }

  multiHeadAttention<D extends TensorDType = 'float32'>(
    q: TensorIn<D>,
    k: TensorIn<D>,
    v: TensorIn<D>,
    options: AttentionOptions & { dtype?: D },
  ): TensorOut<D>;
  multiHeadAttention(
    q: Float32Array | HeapTensor | Float16Tensor,
    k: Float32Array | HeapTensor | Float16Tensor,
    v: Float32Array | HeapTensor | Float16Tensor,
    options: AttentionOptions,
  ): Float32Array | Float16Tensor {
    const fn = 'multiHeadAttention';
    const o = checkOptionsObject(`${fn}: options`, options, ATTENTION_KEYS);
    const wasm = this.wasm;
    const half = checkTensorDType(fn, o.dtype) === 'float16';
    const check = half ? this.checkHalfOperand : this.checkOperand;
    const call = checkAttentionCall(fn, o, q, k, true, v, check, this.checkOperand);
    const { d, qLength, kvLength, vLength, outLength, mask, qIn, kIn, model } = call;
    const vIn = call.vIn!;
    const biasIn = model.bias;
    // A number is a HeapTensor's address: used in place, so it gets no staging slot.
    const outValue = o.out;
    const outIn = outValue === undefined ? undefined : check(`${fn}: out`, outValue, outLength, () => outFormula(d));
    const lseValue = o.lse;
    const lseLength = d.batch * d.numHeads * d.seqLen;
    const lseIn =
      lseValue === undefined
        ? undefined
        : this.checkOperand(
            `${fn}: lse`,
            lseValue,
            lseLength,
            () => `batch*numHeads*seqLen = ${d.batch}*${d.numHeads}*${d.seqLen}`,
          );
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kvLength);
    checkStillUsable(`${fn}: v`, v, vIn, vLength);
    if (biasIn !== undefined)
      checkStillUsable(`${fn}: bias`, model.biasGiven, biasIn, model.biasBatch * model.biasPerItem);
    if (model.rope) checkRopeStillUsable(fn, model.rope);
    checkOutputsApart(fn, call, outIn, lseIn);

    const plan = this.staging;
    plan.plan(wasm, call, outIn, lseIn);
    const { group, biasSliced } = plan;
    // A split call on a pool is pipelined (pipelinedGroups): a single thread would only reorder its copies.
    const pipelined = group < d.batch && this.currentInfo.threads > 1;
    const sets = pipelined ? 2 : 1;
    const qPer = d.seqLen * d.dModel;
    const kvPer = d.kvSeqLen * d.kvDModel;
    const vPer = d.kvSeqLen * d.vDModel;
    const outPer = d.seqLen * d.outDModel;
    const maskPer = d.seqLen * d.kvSeqLen;
    const lsePer = d.numHeads * d.seqLen;
    const biasPer = model.biasPerItem;
    // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
    const qOffset = byteOffsetOf(qIn);
    const kOffset = byteOffsetOf(kIn);
    const vOffset = byteOffsetOf(vIn);
    const outOffset = byteOffsetOf(outIn);
    const maskOffset = byteOffsetOf(mask);
    const biasOffset = byteOffsetOf(biasIn);
    const lseOffset = byteOffsetOf(lseIn);
    // The only allocation of the call: it may grow (and so detach) memory, so views are taken after it.
    plan.layOut(this.arena.reserve(fn, plan.bytes(sets)), sets);
    const callAt = this.arena.callAt();
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
    const wholeBias =
      biasIn === undefined || biasSliced ? 0 : place(wasm, biasIn, biasOffset, 0, biasPer, plan.biasAt(0));
    writeCallOptions(
      wasm,
      this.callLayout,
      callAt,
      call,
      model.alibiSlopes ? alibiSlopesAt : 0,
      model.sinks ? sinksAt : 0,
      model.rope ? ropeCosAt : 0,
      model.rope ? ropeSinAt : 0,
    );
    const staged: StagedCall = {
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
      qPer,
      kvPer,
      vPer,
      outPer,
      maskPer,
      lsePer,
      biasPer,
      outLength,
      lseLength,
      wholeBias,
      kvLengths: model.kvLengths !== undefined,
    };
    if (pipelined) {
      this.pipelinedGroups(fn, staged, d.batch, callAt);
    } else {
      // One group at a time, all in staging set 0: the same staging and copies as the pipeline's.
      for (let b0 = 0; b0 < d.batch; b0 += group) {
        const items = Math.min(group, d.batch - b0);
        stageGroup(wasm, this.callLayout, callAt, plan, staged, b0, items, 0);
        checkStatus(wasm, fn, wasm._mha_attention(callAt));
        copyGroupOut(wasm, plan, staged, b0, items, 0);
      }
    }
    // `out` was a view of this heap that the call's malloc detached (see copyIn; such a call is never split):
    // copyGroupOut wrote the same elements; hand back a view of them in the current memory.
    if (target !== undefined && target.length !== outLength) {
      return half
        ? new Uint16Array(wasm.HEAPU8.buffer, outOffset, outLength)
        : new Float32Array(wasm.HEAPF32.buffer, outOffset, outLength);
    }
    if (half) return halfResult(outValue, target as Uint16Array, q);
    return (target as Float32Array | undefined) ?? (outValue as MallocedTensor).data;
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
  private pipelinedGroups(fn: string, c: StagedCall, batch: number, callAt: number): void {
    const { wasm, callLayout: L, staging: plan } = this;
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

  allocate(length: number): HeapTensor {
    const fn = 'allocate';
    checkDim(`${fn}: length`, length);
    const bytes = length * 4;
    // The tensor starts on a 16-byte boundary, a whole v128.
    const total = bytes + MALLOC_SLACK_FOR_16;
    const block = total < 2 ** 31 ? this.wasm._malloc(total) : 0;
    if (block === 0) {
      throw new RangeError(
        `${fn}: length: ${length} floats need ${bytes} bytes of wasm memory, more than it can provide (2 GiB at most)`,
      );
    }
    return new MallocedTensor(this.wasm, this.tensors, block, align16(block), length);
  }

  get cacheLayout(): CacheCallLayout {
    if (typeof this.cacheCallLayout === 'string') {
      throw new Error(`createKVCache: this wasm module is of another release: ${this.cacheCallLayout}`);
    }
    return this.cacheCallLayout;
  }

  /** A random first cache id per instance: another instance's ids are then unknown to this one's registry. */
  private seedCacheIds(): void {
    if (this.cacheIdsSeeded) return;
    this.wasm._mha_kv_cache_set_next_id(1 + Math.floor(Math.random() * 0xfffffff0));
    this.cacheIdsSeeded = true;
  }

  createKVCache(options: KVCacheOptions): KVCache {
    void this.cacheLayout; // throws for a module of another release
    const config = checkCacheOptions(this.wasm, options);
    this.seedCacheIds();
    return new WasmKVCache(this, createCache(this, config), config);
  }

  loadKVCache(bytes: Uint8Array, options?: LoadKVCacheOptions): KVCache {
    void this.cacheLayout; // throws for a module of another release
    this.seedCacheIds();
    const loaded = loadCache(this.wasm, this.arena, bytes, options);
    return new WasmKVCache(this, loaded.id, loaded.config, loaded.lengths);
  }

  attentionWeights(q: Float32Array, k: Float32Array, options: AttentionWeightsOptions): Float32Array {
    const fn = 'attentionWeights';
    checkNoOutputs(fn, options);
    const o = checkOptionsObject(`${fn}: options`, options, WEIGHTS_KEYS);
    const call = checkAttentionCall(fn, o, q, k, false, undefined, checkArrayOnly, this.checkOperand);
    const stage = checkStage(fn, o.stage);
    const { d, qLength, kvLength: kLength, mask, qIn, kIn, model } = call;
    const { bias: biasIn, kvLengths, alibiSlopes, sinks, rope, ropeRows } = model;
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kLength);
    const biasLength = model.biasBatch * model.biasPerItem;
    if (biasIn !== undefined) checkStillUsable(`${fn}: bias`, model.biasGiven, biasIn, biasLength);
    if (rope) checkRopeStillUsable(fn, rope);
    const weightsLength = d.batch * d.numHeads * d.seqLen * d.kvSeqLen;
    if (weightsLength >= MAX_ELEMENTS) {
      throw new RangeError(
        `${fn}: shape too large: batch*numHeads*seqLen*kvSeqLen = ${weightsLength} weights, expected fewer than 2^31`,
      );
    }

    const ropeBytes = rope ? ropeRows * rope.half * 4 : 0;
    const sizes = [
      qLength * 4,
      kLength * 4,
      weightsLength * 4,
      mask ? mask.length : 0,
      typeof biasIn === 'object' ? biasLength * 4 : 0,
      kvLengths ? kvLengths.byteLength : 0,
      alibiSlopes ? alibiSlopes.byteLength : 0,
      sinks ? sinks.byteLength : 0,
      ropeBytes,
      ropeBytes,
    ];
    const [qOffset, kOffset, maskOffset, biasOffset] = [
      qIn.byteOffset,
      kIn.byteOffset,
      byteOffsetOf(mask),
      byteOffsetOf(biasIn),
    ];
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const callAt = this.arena.callAt();
    const [qAt, kAt, wAt, maskAt, biasAt, kvLengthsAt, alibiAt, sinksAt, cosAt, sinAt] = layout(base, sizes) as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const wasm = this.wasm;
    const heap = wasm.HEAPF32;
    copyIn(heap, qIn, qOffset, 0, qLength, qAt);
    copyIn(heap, kIn, kOffset, 0, kLength, kAt);
    if (mask) copyIn(wasm.HEAPU8, mask, maskOffset, 0, mask.length, maskAt);
    const biasAddress = biasIn === undefined ? 0 : place(wasm, biasIn, biasOffset, 0, biasLength, biasAt);
    if (kvLengths) wasm.HEAP32.set(kvLengths, kvLengthsAt >>> 2);
    if (alibiSlopes) heap.set(alibiSlopes, alibiAt >>> 2);
    if (sinks) heap.set(sinks, sinksAt >>> 2);
    if (rope) stageRope(heap, rope, 0, ropeRows, cosAt, sinAt);
    writeCallOptions(
      wasm,
      this.callLayout,
      callAt,
      call,
      alibiSlopes ? alibiAt : 0,
      sinks ? sinksAt : 0,
      rope ? cosAt : 0,
      rope ? sinAt : 0,
      stage,
    );
    writeCallOperands(
      wasm,
      this.callLayout,
      callAt,
      qAt,
      kAt,
      0,
      wAt,
      mask ? maskAt : 0,
      biasAddress,
      model.biasBatch,
      kvLengths ? kvLengthsAt : 0,
      0,
      d.batch,
    );
    checkStatus(wasm, fn, wasm._mha_attention_weights(callAt));
    return copyOut(wasm.HEAPF32, wAt >>> 2, weightsLength);
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
    for (const tensor of this.tensors) MallocedTensor.release(tensor, 'dispose()');
    for (const cache of this.caches) WasmKVCache.release(cache, 'dispose()');
    this.wasm._mha_kv_cache_free_all();
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
    checkArrayOnly(`${fn}: ${name}`, x, length, formula);
    const sizes = [length * 4, length * 4];
    const xOffset = x.byteOffset;
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const [fromAt, toAt] = layout(base, sizes) as [number, number];
    copyIn(this.wasm.HEAPF32, x, xOffset, 0, length, fromAt);
    const status = split
      ? this.wasm._mha_split_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads)
      : this.wasm._mha_merge_heads(fromAt, toAt, d.batch, d.seqLen, d.dModel, d.numHeads);
    checkStatus(this.wasm, fn, status);
    return copyOut(this.wasm.HEAPF32, toAt >>> 2, length);
  }
}
