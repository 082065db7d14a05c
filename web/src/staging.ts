// Heap staging: the instance's one reusable allocation (the arena), the slots a call lays out in it,
// copies in and out, and the staging plan of multiHeadAttention (what is staged, and how many batch items
// per kernel call). Steady-state calls allocate nothing on the wasm heap, which cannot fragment under
// mixed calls.
import type { AttentionCall } from './attention-options.js';
import type { Rope } from './rope-options.js';
import { doesNotFit, mallocBytes } from './heap.js';
import type { MhaWasmModule } from './mha.js';

/**
 * Spare bytes of a malloc block that must hold a 16-byte aligned run: malloc aligns to 8 bytes here
 * (emmalloc: alignof(max_align_t)), and 12 spare bytes let the run start at align16(block) for any malloc
 * alignment of at least 4 (a whole v128).
 */
export const MALLOC_SLACK_FOR_16 = 12;

/** An address or a byte count rounded up to 16 bytes (a whole v128). */
export function align16(value: number): number {
  return Math.ceil(value / 16) * 16;
}

/**
 * One allocation per instance, reused by every call; it only grows. It starts with the slot of the
 * attention call struct (call-abi.ts), then the staging of the call.
 */
export class StagingArena {
  /** What malloc returned (0: none), which release() frees. */
  private malloced = 0;
  /** Staging bytes the block has room for after the call struct; -1 without a block. */
  private bytes = -1;
  /** Bytes before the staging: the call struct, rounded up to keep the staging 16-byte aligned. */
  private readonly callSlot: number;

  constructor(
    private readonly wasm: MhaWasmModule,
    callBytes: number,
  ) {
    this.callSlot = align16(callBytes);
  }

  /** `malloced` rounded up to 16 bytes: the call struct's slot, then the staging. */
  private get block(): number {
    return align16(this.malloced);
  }

  /**
   * Returns the base address of room for `bytes` of staging (the call struct's slot is before it, at
   * callAt()), or throws a RangeError naming `fn`. The error counts the staging only: the inputs and output.
   */
  reserve(fn: string, bytes: number): number {
    if (bytes <= this.bytes) return this.block + this.callSlot;
    this.release();
    // The slots are 16-byte aligned, as layout() promises.
    const total = this.callSlot + bytes + MALLOC_SLACK_FOR_16;
    const block = mallocBytes(this.wasm, total);
    if (block === 0) throw new RangeError(`${fn}: staging the inputs and output ${doesNotFit(this.wasm, bytes)}`);
    this.malloced = block;
    this.bytes = bytes;
    return this.block + this.callSlot;
  }

  /** Staging bytes the current block has room for (-1: no block). */
  get room(): number {
    return this.bytes;
  }

  /** The address of the call struct's slot, once reserve() has returned. */
  callAt(): number {
    return this.block;
  }

  release(): void {
    if (this.malloced !== 0) this.wasm._free(this.malloced);
    this.malloced = 0;
    this.bytes = -1;
  }
}

/** Lays buffers out back to back, each 16-byte aligned, and returns their addresses. */
export function layout(base: number, sizes: readonly number[]): number[] {
  const addresses: number[] = [];
  let offset = base;
  for (const size of sizes) {
    addresses.push(offset);
    offset += align16(size);
  }
  return addresses;
}

export function totalBytes(sizes: readonly number[]): number {
  return sizes.reduce((sum, size) => sum + align16(size), 0);
}

/**
 * Copies elements [start, start + length) of a typed-array argument into the staging slot at byte address
 * `at` (`heap` is the wasm memory viewed as the argument's element type). The staging malloc detaches
 * views of this instance's own heap (a tensor's `data`, or what a call with a HeapTensor `out` returned)
 * when it grows the memory; no other buffer can be detached during a call (no user code runs), so an
 * argument that now reads as empty is such a view, found again in the heap by the byte offset it had
 * before the malloc.
 */
export function copyIn<A extends Float32Array | Uint8Array>(
  heap: A,
  array: A,
  byteOffset: number,
  start: number,
  length: number,
  at: number,
): void {
  const shift = heap.BYTES_PER_ELEMENT === 4 ? 2 : 0;
  if (array.length === 0 && length !== 0) {
    heap.copyWithin(at >>> shift, (byteOffset >>> shift) + start, (byteOffset >>> shift) + start + length);
  } else {
    heap.set(start === 0 && length === array.length ? array : array.subarray(start, start + length), at >>> shift);
  }
}

/** The byte offset of a typed-array operand, read before any malloc of the call (0 for a HeapTensor's address). */
export function byteOffsetOf(operand: ArrayBufferView | number | undefined): number {
  return typeof operand === 'object' ? operand.byteOffset : 0;
}

/**
 * Staging bytes of a multiHeadAttention operand: none for a HeapTensor (its address, a number); float32 for
 * the elements of a Float32Array, and of the binary16 bits of a Uint16Array (widened as they are staged).
 */
function stagedBytes(operand: Operand | undefined, length: number): number {
  return typeof operand === 'number' ? 0 : length * 4;
}

/**
 * The address the kernel reads elements [start, start + length) of an operand from: a HeapTensor's own,
 * or the staging slot `at` that a Float32Array's elements are copied to, or a Uint16Array's binary16
 * elements are widened to (exactly, to float32: docs/spec.md 4.2). A Uint16Array that viewed this heap and
 * was detached by the staging malloc is read where its elements are, at its old byte offset (see copyIn).
 */
export function place(
  wasm: MhaWasmModule,
  operand: Operand,
  byteOffset: number,
  start: number,
  length: number,
  at: number,
): number {
  if (typeof operand === 'number') return operand + start * 4;
  if (operand instanceof Uint16Array) {
    // The bits go to the slot's upper half, and the core widens them into the whole slot in place (SIMD;
    // a JS loop was 6x slower).
    const bitsAt = at + length * 2;
    const slot = new Uint16Array(wasm.HEAPU8.buffer, bitsAt, length);
    if (operand.length === 0 && length !== 0)
      slot.set(new Uint16Array(wasm.HEAPU8.buffer, byteOffset + start * 2, length));
    else slot.set(start === 0 && length === operand.length ? operand : operand.subarray(start, start + length));
    wasm._mha_widen_halves(bitsAt, at, length);
    return at;
  }
  copyIn(wasm.HEAPF32, operand, byteOffset, start, length, at);
  return at;
}

/**
 * Copies elements [start, start + length) of a result from the heap slot at byte address `from` into the
 * caller's array: float32 as it is, or rounded once to binary16 for a Uint16Array (dtype 'float16'). An
 * array that views this heap and was detached by the call's malloc gets its elements written where they
 * are, at its old byte offset (`fullLength` elements from there).
 */
export function copyResult(
  wasm: MhaWasmModule,
  target: Float32Array | Uint16Array,
  fullLength: number,
  byteOffset: number,
  from: number,
  start: number,
  length: number,
): void {
  if (target instanceof Uint16Array) {
    // Rounded in place by the core, then copied as bits.
    wasm._mha_narrow_floats(from, from, length);
    const bits = target.length !== fullLength ? new Uint16Array(wasm.HEAPU8.buffer, byteOffset, fullLength) : target;
    bits.set(new Uint16Array(wasm.HEAPU8.buffer, from, length), start);
    return;
  }
  const heap = wasm.HEAPF32;
  if (target.length !== fullLength) heap.copyWithin((byteOffset >>> 2) + start, from >>> 2, (from >>> 2) + length);
  else target.set(heap.subarray(from >>> 2, (from >>> 2) + length), start);
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
export function unfilledFloat32Array(length: number): Float32Array {
  if (allocUnsafeSlow !== undefined && length >= 4096) {
    const bytes = allocUnsafeSlow(length * 4);
    if (
      bytes instanceof Uint8Array &&
      bytes.byteOffset === 0 &&
      bytes.buffer instanceof ArrayBuffer &&
      bytes.buffer.byteLength === length * 4
    ) {
      return new Float32Array(bytes.buffer, 0, length);
    }
  }
  return new Float32Array(length);
}

/** Elements [from, from + length) of `heap` in a new Float32Array of their own. */
export function copyOut(heap: Float32Array, from: number, length: number): Float32Array {
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
 * A q, k, v or out operand of multiHeadAttention: a Float32Array to stage, a Uint16Array of binary16 bits
 * (dtype 'float16') to widen into the staging, or a HeapTensor's address.
 */
export type Operand = Float32Array | Uint16Array | number;

/**
 * How many batch items multiHeadAttention stages per kernel call. Staging a whole large call copies all
 * inputs before the kernel reads any of them: past the L2 cache the kernel then reads them back from
 * memory, and the copy-out reads a cold output. Staged a group of items at a time, each copy is still
 * in cache when it is read (measured, 1 thread: bert-b8 13.5-13.9 ms instead of 15.7-16.6, cross
 * (4,64,1024,512,8) 18.2-18.6 instead of 19.9-20.4). The result has the same bits: the kernel runs every
 * (batch item, head, query row) through the same operations however the call is split.
 *
 * A call is split only when its batch slices are independent: no typed array that views this heap (the
 * staging malloc can detach it, which the whole-call path handles), and outputs (out, lse) that overlap an
 * input only as the identical range (then each group writes only rows that group has already read).
 * `perItem`: the bytes staged per batch item.
 */
function stagingGroup(
  wasm: MhaWasmModule,
  batch: number,
  perItem: number,
  inputs: readonly (Operand | undefined)[],
  outputs: readonly (Operand | undefined)[],
  mask: Uint8Array | undefined,
): number {
  const heapBuffer = wasm.HEAPF32.buffer;
  if (mask?.buffer === heapBuffer) return batch;
  for (const operand of [...inputs, ...outputs]) {
    if (typeof operand === 'object' && operand.buffer === heapBuffer) return batch;
  }
  for (const output of outputs) {
    if (typeof output !== 'object') continue;
    for (const input of inputs) {
      if (typeof input !== 'object' || input === output || input.buffer !== output.buffer) continue;
      const same = input.byteOffset === output.byteOffset && input.length === output.length;
      const overlap =
        input.byteOffset < output.byteOffset + output.byteLength &&
        output.byteOffset < input.byteOffset + input.byteLength;
      if (overlap && !same) return batch;
    }
  }
  return Math.max(1, Math.min(batch, Math.floor(STAGING_GROUP_BYTES / perItem)));
}

/** The slots of a multiHeadAttention call's staging, in layout order. */
const enum Slot {
  q,
  k,
  v,
  out,
  mask,
  bias,
  kvLengths,
  alibiSlopes,
  lse,
  sinks,
  ropeCos,
  ropeSin,
  count,
}

/**
 * What one multiHeadAttention call stages, per kernel call of `group` batch items, and where: slots (0
 * bytes: no slot) for q, k, v, out and the mask, and the bias, all a group's slice; the key lengths and
 * ALiBi slopes, whole (a few bytes; each kernel call reads its slice of the key lengths); the lse, a
 * group's slice. A bias broadcast over the batch (biasShape [1, ...]) is staged once, whole. Self-attention
 * often passes one array as q, k and v: it is staged once (the kernel only reads them). One per instance,
 * refilled by every call (calls do not nest: no user code runs once the arguments are checked), so a call
 * allocates nothing for its plan.
 *
 * A pipelined call (multi-head-attention.ts: a split call on a thread pool) lays the group slots out twice, as sets 0
 * and 1: the pool computes one group from one set while the calling thread copies the previous group's
 * result out of the other set and the next group's inputs into it. The whole-call slots exist once.
 */
export class AttentionStaging {
  group = 0;
  kIsQ = false;
  vIsK = false;
  vIsQ = false;
  /** The kernel writes its result over the staged q (no out slot). */
  resultInQ = false;
  /** The bias is staged (or addressed) a group's items at a time. */
  biasSliced = false;
  /** Bytes of each slot. */
  private readonly sizes: number[] = new Array<number>(Slot.count).fill(0);
  /** Byte address of each slot of set 0, then of set 1, once laidOut(). */
  private readonly at: number[] = new Array<number>(2 * Slot.count).fill(0);

  /** Plans the staging of a checked call and its outputs (operands: a typed array, or a heap tensor's address). */
  plan(
    wasm: MhaWasmModule,
    call: AttentionCall<Operand, Operand>,
    out: Operand | undefined,
    lse: Operand | undefined,
  ): void {
    const { d, qIn: q, kIn: k, mask } = call;
    const { bias, biasPerItem, kvLengths, alibiSlopes, sinks, rope, ropeRows } = call.model;
    const v = call.vIn!;
    const kIsQ = k === q;
    // v is another tensor than q and k when its width (Hkv·Dv) differs from theirs.
    const vIsK = v === k && d.vDModel === d.kvDModel;
    const vIsQ = !vIsK && v === q && d.vDModel === d.dModel;
    const biasSliced = bias !== undefined && call.model.biasBatch > 1;
    // Per batch item: elements of q/out, k/v, lse, bytes of the mask; then the bytes staged per item.
    const qPer = d.seqLen * d.dModel;
    const kvPer = d.kvSeqLen * d.kvDModel;
    const vPer = d.kvSeqLen * d.vDModel;
    const outPer = d.seqLen * d.outDModel;
    const maskPer = d.seqLen * d.kvSeqLen;
    const lsePer = d.numHeads * d.seqLen;
    // The kernel may write its result over q (attention.hpp): a staged q that k and v do not share takes
    // it, so the call stages one buffer fewer (bert: 1.2 instead of 1.6 MB, 2-3% faster a call). Only
    // when out has q's shape (no vHeadDim other than headDim).
    const resultInQ = typeof q !== 'number' && typeof out !== 'number' && !kIsQ && v !== q && d.outDModel === d.dModel;
    const perItem =
      stagedBytes(q, qPer) +
      (kIsQ ? 0 : stagedBytes(k, kvPer)) +
      (vIsK || vIsQ ? 0 : stagedBytes(v, vPer)) +
      (resultInQ ? 0 : stagedBytes(out, outPer)) +
      (mask ? maskPer : 0) +
      (biasSliced ? stagedBytes(bias, biasPerItem) : 0) +
      stagedBytes(lse, lsePer);
    const group =
      perItem * d.batch <= STAGING_GROUP_BYTES
        ? d.batch
        : stagingGroup(wasm, d.batch, perItem, [q, k, v, bias], [out, lse], mask);
    const sizes = this.sizes;
    sizes[Slot.q] = stagedBytes(q, group * qPer);
    sizes[Slot.k] = kIsQ ? 0 : stagedBytes(k, group * kvPer);
    sizes[Slot.v] = vIsK || vIsQ ? 0 : stagedBytes(v, group * vPer);
    sizes[Slot.out] = resultInQ ? 0 : stagedBytes(out, group * outPer);
    sizes[Slot.mask] = mask ? group * maskPer : 0;
    sizes[Slot.bias] = stagedBytes(bias, biasSliced ? group * biasPerItem : biasPerItem);
    sizes[Slot.kvLengths] = kvLengths ? kvLengths.byteLength : 0;
    sizes[Slot.alibiSlopes] = alibiSlopes ? alibiSlopes.byteLength : 0;
    sizes[Slot.lse] = stagedBytes(lse, group * lsePer);
    sizes[Slot.sinks] = sinks ? sinks.byteLength : 0;
    sizes[Slot.ropeCos] = rope ? ropeRows * rope.half * 4 : 0;
    sizes[Slot.ropeSin] = sizes[Slot.ropeCos];
    this.group = group;
    this.kIsQ = kIsQ;
    this.vIsK = vIsK;
    this.vIsQ = vIsQ;
    this.resultInQ = resultInQ;
    this.biasSliced = biasSliced;
  }

  /** Whether a slot holds a group's slice (so a pipelined call has it twice), not the whole call's data. */
  private perGroup(slot: Slot): boolean {
    return (
      slot !== Slot.kvLengths &&
      slot !== Slot.alibiSlopes &&
      slot !== Slot.sinks &&
      slot !== Slot.ropeCos &&
      slot !== Slot.ropeSin &&
      (slot !== Slot.bias || this.biasSliced)
    );
  }

  /** Bytes the planned slots take, each 16-byte aligned, with `sets` (1 or 2) sets of the group slots. */
  bytes(sets: number): number {
    let bytes = 0;
    for (let slot = 0; slot < Slot.count; slot++) bytes += align16(this.sizes[slot]!);
    if (sets !== 2) return bytes;
    for (let slot = 0; slot < Slot.count; slot++) if (this.perGroup(slot)) bytes += align16(this.sizes[slot]!);
    return bytes;
  }

  /**
   * Lays the planned slots out from `base`, back to back, each 16-byte aligned: set 0, then (sets = 2) the
   * group slots of set 1, whose whole-call slots are set 0's. (Set 1's addresses are only read with sets = 2.)
   */
  layOut(base: number, sets: number): void {
    let offset = base;
    for (let slot = 0; slot < Slot.count; slot++) {
      this.at[slot] = offset;
      offset += align16(this.sizes[slot]!);
    }
    if (sets !== 2) return;
    for (let slot = 0; slot < Slot.count; slot++) {
      if (this.perGroup(slot)) {
        this.at[Slot.count + slot] = offset;
        offset += align16(this.sizes[slot]!);
      } else {
        this.at[Slot.count + slot] = this.at[slot]!;
      }
    }
  }

  qAt(set: number): number {
    return this.at[set * Slot.count + Slot.q]!;
  }
  kAt(set: number): number {
    return this.at[set * Slot.count + Slot.k]!;
  }
  vAt(set: number): number {
    return this.at[set * Slot.count + Slot.v]!;
  }
  /** Where the kernel writes its result: the out slot, or the staged q. */
  outAt(set: number): number {
    return this.at[set * Slot.count + (this.resultInQ ? Slot.q : Slot.out)]!;
  }
  maskAt(set: number): number {
    return this.at[set * Slot.count + Slot.mask]!;
  }
  biasAt(set: number): number {
    return this.at[set * Slot.count + Slot.bias]!;
  }
  lseAt(set: number): number {
    return this.at[set * Slot.count + Slot.lse]!;
  }
  get kvLengthsAt(): number {
    return this.at[Slot.kvLengths]!;
  }
  get alibiSlopesAt(): number {
    return this.at[Slot.alibiSlopes]!;
  }
  get sinksAt(): number {
    return this.at[Slot.sinks]!;
  }
  get ropeCosAt(): number {
    return this.at[Slot.ropeCos]!;
  }
  get ropeSinAt(): number {
    return this.at[Slot.ropeSin]!;
  }
}

/** Copies rows [fromRow, toRow) of the rope tables into the staging slots at byte addresses `cosAt` and `sinAt`. */
export function stageRope(
  heap: Float32Array,
  rope: Rope,
  fromRow: number,
  toRow: number,
  cosAt: number,
  sinAt: number,
): void {
  const [begin, end] = [fromRow * rope.half, toRow * rope.half];
  heap.set(begin === 0 && end === rope.cos.length ? rope.cos : rope.cos.subarray(begin, end), cosAt >>> 2);
  heap.set(begin === 0 && end === rope.sin.length ? rope.sin : rope.sin.subarray(begin, end), sinAt >>> 2);
}
