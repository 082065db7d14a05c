// attentionWeights (docs/spec.md 4.3): the (B, H, S, T) weights of float32 q and k at a chosen stage,
// checked like multiHeadAttention's call (attention-options.ts), staged whole (no batch groups) and
// computed by one direct wasm call. Shapes: B batch, S query length, T key/value length, H heads.
import { checkAttentionCall } from './attention-options.js';
import type { AttentionCall } from './attention-options.js';
import { writeCallOperands, writeCallOptions } from './call-abi.js';
import { checkArrayOnly, checkRopeStillUsable, checkStillUsable } from './heap-tensor.js';
import type { AttentionHost } from './multi-head-attention.js';
import { checkStage } from './option-checks.js';
import { byteOffsetOf, copyIn, copyOut, layout, place, stageRope, totalBytes } from './staging.js';
import type { Operand } from './staging.js';
import { checkStatus } from './status.js';
import type { AttentionWeightsOptions } from './types.js';
import { checkOptionsObject, MAX_ELEMENTS, WEIGHTS_KEYS } from './validate.js';

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
        "returns float32 weights; dtype: 'float16' is an option of multiHeadAttention (KVCache.attend's tensorDType)",
    );
  }
}

/** attentionWeights of the instance `host` (the MHA method). */
export function attentionWeights(
  host: AttentionHost,
  q: Float32Array,
  k: Float32Array,
  options: AttentionWeightsOptions,
): Float32Array {
  const fn = 'attentionWeights';
  checkNoOutputs(fn, options);
  const o = checkOptionsObject(`${fn}: options`, options, WEIGHTS_KEYS);
  const call = checkAttentionCall(fn, o, q, k, false, undefined, checkArrayOnly, host.checkOperand);
  const stage = checkStage(fn, o.stage);
  const { d, qLength, kvLength: kLength, qIn, kIn, model } = call;
  checkStillUsable(`${fn}: q`, q, qIn, qLength);
  checkStillUsable(`${fn}: k`, k, kIn, kLength);
  const biasLength = model.biasBatch * model.biasPerItem;
  if (model.bias !== undefined) checkStillUsable(`${fn}: bias`, model.biasGiven, model.bias, biasLength);
  if (model.rope) checkRopeStillUsable(fn, model.rope);
  const weightsLength = d.batch * d.numHeads * d.seqLen * d.kvSeqLen;
  if (weightsLength >= MAX_ELEMENTS) {
    throw new RangeError(
      `${fn}: shape too large: batch*numHeads*seqLen*kvSeqLen = ${weightsLength} weights, expected fewer than 2^31`,
    );
  }
  return stageWeights(host, fn, call, stage, weightsLength);
}

/** Stages a checked call whole, writes the call struct, calls the core and copies the weights out. */
function stageWeights(
  host: AttentionHost,
  fn: string,
  call: AttentionCall<Float32Array, Operand>,
  stage: number,
  weightsLength: number,
): Float32Array {
  const { d, qLength, kvLength: kLength, mask, qIn, kIn, model } = call;
  const { bias: biasIn, kvLengths, alibiSlopes, sinks, rope, ropeRows } = model;
  const biasLength = model.biasBatch * model.biasPerItem;
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
  const base = host.arena.reserve(fn, totalBytes(sizes));
  const callAt = host.arena.callAt();
  const [qAt, kAt, wAt, maskAt, biasAt, kvLengthsAt, alibiAt, sinksAt, cosAt, sinAt] = layout(base, sizes);
  const wasm = host.wasm;
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
    host.callLayout,
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
    host.callLayout,
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
