// mha.mergeAttention (docs/spec.md 5.3): attention states (out, lse) computed over disjoint key sets of the
// same queries, merged into the state of the attention over their union (FlashInfer's merge_state):
//   lse = ln Σ_p exp(lse_p),   out = Σ_p exp(lse_p − lse) · out_p.
// Shapes: B batch, S query rows, H heads, Dv value head size; out (B, S, H·Dv), lse (B, H, S).
// Plain JS over the parts' float32 values (a heap tensor read through its live view): no wasm call, so it
// gives the same bits in every build and engine.
import { describe } from './describe.js';
import { checkOperand } from './heap-tensor.js';
import type { AttentionState } from './kv-cache-types.js';
import type { MhaWasmModule } from './mha.js';
import { checkDim, checkOptionsObject } from './validate.js';

const FN = 'mergeAttention';

/** The shape of the states mergeAttention takes: Dv comes from out's length. */
export interface MergeAttentionOptions {
  batch: number;
  seqLen: number;
  numHeads: number;
}

/** One part's out and lse as float32 values (a heap tensor's read from the heap at its address). */
interface PartValues {
  out: Float32Array;
  lse: Float32Array;
}

function values(wasm: MhaWasmModule, operand: Float32Array | number, length: number): Float32Array {
  return typeof operand === 'number' ? new Float32Array(wasm.HEAPF32.buffer, operand, length) : operand;
}

/** Checks `parts` against the shape: every part { out, lse } of B·S·H·Dv and B·H·S floats, Dv from part 0. */
function checkParts(wasm: MhaWasmModule, parts: unknown, o: MergeAttentionOptions): PartValues[] {
  if (!Array.isArray(parts) || parts.length === 0) {
    throw new TypeError(
      `${FN}: parts: expected a non-empty array of attention states { out, lse }, got ${describe(parts)}`,
    );
  }
  const rows = o.batch * o.seqLen * o.numHeads;
  const shape = `batch*seqLen*numHeads = ${o.batch}*${o.seqLen}*${o.numHeads}`;
  const first = (parts[0] as { out?: { length?: unknown } } | null)?.out?.length;
  const dv = typeof first === 'number' && first > 0 && first % rows === 0 ? first / rows : 1;
  const checked: PartValues[] = [];
  for (let p = 0; p < parts.length; p++) {
    const part: unknown = parts[p];
    if (typeof part !== 'object' || part === null) {
      throw new TypeError(`${FN}: parts[${p}]: expected an attention state { out, lse }, got ${describe(part)}`);
    }
    const { out, lse } = part as { out?: unknown; lse?: unknown };
    const outIn = checkOperand(
      `${FN}: parts[${p}].out`,
      out,
      rows * dv,
      () =>
        p === 0
          ? `${shape} times vHeadDim for some vHeadDim >= 1`
          : `${shape}*vHeadDim = ${o.batch}*${o.seqLen}*${o.numHeads}*${dv}, vHeadDim from parts[0].out`,
      wasm,
    );
    const lseIn = checkOperand(
      `${FN}: parts[${p}].lse`,
      lse,
      rows,
      () => `batch*numHeads*seqLen = ${o.batch}*${o.numHeads}*${o.seqLen}`,
      wasm,
    );
    checked.push({ out: values(wasm, outIn, rows * dv), lse: values(wasm, lseIn, rows) });
  }
  return checked;
}

/**
 * Merges `parts` row by row in float64, rounding out and lse once to float32. A part whose row has lse −∞
 * (no visible key, no sink: it adds nothing) is skipped, so an empty row's NaN out ('nan' emptyRows)
 * does not reach the result; a row empty in every part gives out 0 and lse −∞. A NaN lse gives NaN.
 */
export function mergeAttention(wasm: MhaWasmModule, parts: unknown, options: unknown): AttentionState {
  const o = checkOptionsObject(`${FN}: options`, options, ['batch', 'seqLen', 'numHeads'] as const);
  const shape: MergeAttentionOptions = {
    batch: checkDim(`${FN}: batch`, o.batch),
    seqLen: checkDim(`${FN}: seqLen`, o.seqLen),
    numHeads: checkDim(`${FN}: numHeads`, o.numHeads),
  };
  const checked = checkParts(wasm, parts, shape);
  const { batch: B, seqLen: S, numHeads: H } = shape;
  const dv = checked[0]!.out.length / (B * S * H);
  const out = new Float32Array(B * S * H * dv);
  const lse = new Float32Array(B * H * S);
  const acc = new Float64Array(dv);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++)
      for (let i = 0; i < S; i++) {
        const at = (b * H + h) * S + i; // lse (B, H, S)
        const row = ((b * S + i) * H + h) * dv; // out (B, S, H*Dv)
        let max = -Infinity;
        for (const part of checked) max = Math.max(max, part.lse[at]!); // NaN stays NaN
        if (max === -Infinity || Number.isNaN(max)) {
          lse[at] = max;
          out.fill(Number.isNaN(max) ? NaN : 0, row, row + dv);
          continue;
        }
        let sum = 0;
        for (const part of checked) sum += Math.exp(part.lse[at]! - max);
        const merged = max + Math.log(sum);
        acc.fill(0);
        for (const part of checked) {
          const l = part.lse[at]!;
          if (l === -Infinity) continue;
          const w = Math.exp(l - merged);
          for (let d = 0; d < dv; d++) acc[d]! += w * part.out[row + d]!;
        }
        lse[at] = merged;
        out.set(acc, row);
      }
  return { out, lse };
}
