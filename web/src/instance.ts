// The MHA instance: one started wasm module, its staging arena and its heap tensors. Each method checks
// its arguments (validate.ts, attention-options.ts, heap-tensor.ts), stages them (staging.ts), writes the
// call struct (call-abi.ts), makes one direct wasm call and copies the result out.
import { checkAttentionCall } from './attention-options.js';
import type { AttentionCall, TensorCheck } from './attention-options.js';
import { writeCallOperands, writeCallOptions } from './call-abi.js';
import type { CallLayout } from './call-abi.js';
import { checkArrayOnly, checkOperand, checkStillUsable, MallocedTensor } from './heap-tensor.js';
import type { MhaWasmModule } from './mha.js';
import { byteOffsetOf, copyIn, copyOut, layout, place, planAttentionStaging, StagingArena, totalBytes,
  unfilledFloat32Array } from './staging.js';
import type { Operand } from './staging.js';
import { checkStatus } from './status.js';
import type { AttentionOptions, AttentionWeightsOptions, BuildName, HeadShape, HeapTensor, MHA, MHAInfo } from './types.js';
import { ATTENTION_KEYS, checkDim, checkDims, checkOptionsObject, HEAD_KEYS, MAX_ELEMENTS, qFormula,
  WEIGHTS_KEYS } from './validate.js';

/** The MHA of the public API, backed by one instance of a wasm build. */
export class WasmMHA implements MHA {
  // Replaced (not mutated) when dispose() ends the pool, so a caller's copy stays a true snapshot.
  private currentInfo: MHAInfo;
  private readonly arena: StagingArena;
  /** Live tensors of this instance, freed by dispose(). */
  private readonly tensors = new Set<MallocedTensor>();
  /** q, k, v and out of multiHeadAttention: a Float32Array, or a heap tensor of this instance (its address). */
  private readonly checkOperand: TensorCheck<Operand>;

  constructor(private readonly wasm: MhaWasmModule, private readonly callLayout: CallLayout, build: BuildName, threads: number) {
    this.arena = new StagingArena(wasm, callLayout.bytes);
    this.currentInfo = Object.freeze({ version: wasm.version(), simd: wasm.simd(), threads, build });
    this.checkOperand = (name, value, expected, formula) => checkOperand(name, value, expected, formula, wasm);
  }

  get info(): MHAInfo {
    return this.currentInfo;
  }

  multiHeadAttention(q: Float32Array | HeapTensor, k: Float32Array | HeapTensor, v: Float32Array | HeapTensor,
    options: AttentionOptions): Float32Array {
    const fn = 'multiHeadAttention';
    const o = checkOptionsObject(`${fn}: options`, options, ATTENTION_KEYS);
    const wasm = this.wasm;
    const call = checkAttentionCall(fn, o, q, k, true, v, this.checkOperand);
    const { d, qLength, kvLength, mask, qIn, kIn } = call;
    const vIn = call.vIn!;
    // A number is a HeapTensor's address: used in place, so it gets no staging slot.
    const outValue = o.out;
    const outIn = outValue === undefined ? undefined : this.checkOperand(`${fn}: out`, outValue, qLength, () => qFormula(d));
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kvLength);
    checkStillUsable(`${fn}: v`, v, vIn, kvLength);
    if (typeof outIn === 'number') {
      // Distinct live tensors never overlap, so only the same tensor can alias the output.
      for (const [name, input] of [['q', qIn], ['k', kIn], ['v', vIn]] as const) {
        if (input === outIn) {
          throw new TypeError(`${fn}: out: expected a HeapTensor other than ${name} (the kernel reads ${name} while it writes out), got ${name} itself`);
        }
      }
    }

    const plan = planAttentionStaging(wasm, d, qIn, kIn, vIn, outIn, mask);
    const { group, kIsQ, vIsK, vIsQ } = plan;
    const qPer = d.seqLen * d.dModel;
    const kvPer = d.kvSeqLen * d.dModel;
    const maskPer = d.seqLen * d.kvSeqLen;
    // Byte offsets are read before the malloc, which may detach views of this heap (see copyIn).
    const [qOffset, kOffset, vOffset, outOffset, maskOffset] = [byteOffsetOf(qIn), byteOffsetOf(kIn), byteOffsetOf(vIn),
      byteOffsetOf(outIn), byteOffsetOf(mask)];
    // The only allocation of the call: it may grow (and so detach) memory, so views are taken after it.
    const base = this.arena.reserve(fn, totalBytes(plan.sizes));
    const callAt = this.arena.callAt();
    const [qAt, kAt, vAt, outSlot, maskAt] = layout(base, plan.sizes) as [number, number, number, number, number];
    const outAt = plan.resultInQ ? qAt : outSlot;
    const target = typeof outIn === 'number' ? undefined : outIn ?? unfilledFloat32Array(qLength);
    writeCallOptions(wasm, this.callLayout, callAt, call);
    for (let b0 = 0; b0 < d.batch; b0 += group) {
      const items = Math.min(group, d.batch - b0);
      const heap = wasm.HEAPF32;
      const qAddress = place(heap, qIn, qOffset, b0 * qPer, items * qPer, qAt);
      const kAddress = kIsQ ? qAddress : place(heap, kIn, kOffset, b0 * kvPer, items * kvPer, kAt);
      const vAddress = vIsK ? kAddress : vIsQ ? qAddress : place(heap, vIn, vOffset, b0 * kvPer, items * kvPer, vAt);
      if (mask) copyIn(wasm.HEAPU8, mask, maskOffset, b0 * maskPer, items * maskPer, maskAt);
      writeCallOperands(wasm, this.callLayout, callAt, qAddress, kAddress, vAddress,
        typeof outIn === 'number' ? outIn + b0 * qPer * 4 : outAt, mask ? maskAt : 0, items);
      checkStatus(wasm, fn, wasm._mha_attention(callAt));
      if (target === undefined) continue;
      // The kernel's scratch may have grown memory: a fresh view to copy out.
      const result = wasm.HEAPF32;
      if (target.length !== qLength) {
        // `out` is a view of this heap that the call's malloc detached (see copyIn; such a call is never
        // split): write the same elements and hand back a view of them in the current memory.
        result.copyWithin(outOffset >>> 2, outAt >>> 2, (outAt >>> 2) + qLength);
        return new Float32Array(result.buffer, outOffset, qLength);
      }
      target.set(result.subarray(outAt >>> 2, (outAt >>> 2) + items * qPer), b0 * qPer);
    }
    return target ?? (outValue as MallocedTensor).data;
  }

  allocate(length: number): HeapTensor {
    const fn = 'allocate';
    checkDim(`${fn}: length`, length);
    const bytes = length * 4;
    // malloc aligns to 8 bytes here (emmalloc: alignof(max_align_t)); 12 spare bytes let the tensor start
    // on a 16-byte boundary, a whole v128, for any malloc alignment of at least 4.
    const block = bytes + 12 < 2 ** 31 ? this.wasm._malloc(bytes + 12) : 0;
    if (block === 0) {
      throw new RangeError(`${fn}: length: ${length} floats need ${bytes} bytes of wasm memory, more than it can provide (2 GiB at most)`);
    }
    return new MallocedTensor(this.wasm, this.tensors, block, Math.ceil(block / 16) * 16, length);
  }

  attentionWeights(q: Float32Array, k: Float32Array, options: AttentionWeightsOptions): Float32Array {
    const fn = 'attentionWeights';
    const o = checkOptionsObject(`${fn}: options`, options, WEIGHTS_KEYS);
    const call: AttentionCall<Float32Array> = checkAttentionCall(fn, o, q, k, false, undefined, checkArrayOnly);
    const { d, qLength, kvLength: kLength, mask, qIn, kIn } = call;
    checkStillUsable(`${fn}: q`, q, qIn, qLength);
    checkStillUsable(`${fn}: k`, k, kIn, kLength);
    const weightsLength = d.batch * d.numHeads * d.seqLen * d.kvSeqLen;
    if (weightsLength >= MAX_ELEMENTS) {
      throw new RangeError(
        `${fn}: shape too large: batch*numHeads*seqLen*kvSeqLen = ${weightsLength} weights, expected fewer than 2^31`,
      );
    }

    const sizes = [qLength * 4, kLength * 4, weightsLength * 4, mask ? mask.length : 0];
    const [qOffset, kOffset, maskOffset] = [qIn.byteOffset, kIn.byteOffset, byteOffsetOf(mask)];
    const base = this.arena.reserve(fn, totalBytes(sizes));
    const callAt = this.arena.callAt();
    const [qAt, kAt, wAt, maskAt] = layout(base, sizes) as [number, number, number, number];
    const heap = this.wasm.HEAPF32;
    copyIn(heap, qIn, qOffset, 0, qLength, qAt);
    copyIn(heap, kIn, kOffset, 0, kLength, kAt);
    if (mask) copyIn(this.wasm.HEAPU8, mask, maskOffset, 0, mask.length, maskAt);
    writeCallOptions(this.wasm, this.callLayout, callAt, call);
    writeCallOperands(this.wasm, this.callLayout, callAt, qAt, kAt, 0, wAt, mask ? maskAt : 0, d.batch);
    checkStatus(this.wasm, fn, this.wasm._mha_attention_weights(callAt));
    return copyOut(this.wasm.HEAPF32, wAt >>> 2, weightsLength);
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
