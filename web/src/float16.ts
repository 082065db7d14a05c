// IEEE binary16 tensors (docs/spec.md 4.2): the exact widening of binary16 bits to float32 as they are
// staged into the wasm heap, and the one rounding of a float32 result to binary16 (nearest even, overflow
// to ±Infinity, NaN stays NaN) as it is copied out. The package's only float16 code; no wasm is involved.
import type { Float16Tensor } from './types.js';

/** float32 value of every binary16 bit pattern, built on first use (256 KiB). */
let widened: Float32Array | undefined;

function widenTable(): Float32Array {
  if (widened !== undefined) return widened;
  const table = new Float32Array(65536);
  const bits = new Uint32Array(table.buffer);
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) << 16;
    const exponent = (h >>> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    if (exponent === 0x1f) bits[h] = sign | 0x7f800000 | (mantissa << 13);  // ±Infinity, NaN (payload kept)
    else if (exponent !== 0) bits[h] = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else table[h] = (sign !== 0 ? -1 : 1) * mantissa * 2 ** -24;  // zero and subnormals, exact
  }
  widened = table;
  return table;
}

/** The binary16 bits nearest (ties to even) to the float32 whose bits are `x`; ±Infinity past 65504. */
export function float32BitsToFloat16(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  let mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa !== 0 ? 0x200 | (mantissa >>> 13) : 0);
  const e = exponent - 112;  // the binary16 exponent field
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;  // below 2^-25: rounds to ±0
    mantissa |= 0x800000;
    const shift = 14 - e;
    const kept = mantissa >>> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const middle = 1 << (shift - 1);
    return sign | (rest > middle || (rest === middle && (kept & 1) !== 0) ? kept + 1 : kept);
  }
  const half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  // A carry out of the mantissa steps the exponent (up to Infinity, 0x7c00): still the nearest.
  return sign | (rest > 0x1000 || (rest === 0x1000 && (half & 1) !== 0) ? half + 1 : half);
}

/** heap[at + i] = the float32 value of the binary16 bits source[start + i], for i in [0, length). */
export function widenInto(heap: Float32Array, at: number, source: Uint16Array, start: number, length: number): void {
  const table = widenTable();
  for (let i = 0; i < length; i++) heap[at + i] = table[source[start + i]!]!;
}

/** target[start + i] = bits[from + i] (float32 bits) rounded once to binary16, for i in [0, length). */
export function roundInto(target: Uint16Array, start: number, bits: Int32Array, from: number, length: number): void {
  for (let i = 0; i < length; i++) target[start + i] = float32BitsToFloat16(bits[from + i]!);
}

/** The engine's Float16Array constructor (ES2025), or undefined where it has none (Node 20, older engines). */
export const Float16ArrayCtor: (new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView & { length: number }) |
  undefined = (globalThis as { Float16Array?: never }).Float16Array;

/** Whether `value` is a Float16Array of this engine. */
export function isFloat16Array(value: unknown): value is ArrayBufferView & { length: number } {
  return Float16ArrayCtor !== undefined && value instanceof Float16ArrayCtor;
}

/** The binary16 bits of a Uint16Array or Float16Array, as a Uint16Array over the same memory (a view, no copy). */
export function bitsView(value: ArrayBufferView & { length: number }): Uint16Array {
  return value instanceof Uint16Array ? value : new Uint16Array(value.buffer, value.byteOffset, value.length);
}

/**
 * What a dtype 'float16' call returns: the `out` it was given (a Uint16Array or Float16Array), else the new
 * bits `target`, as a Float16Array view when q was a Float16Array.
 */
export function halfResult(outValue: unknown, target: Uint16Array, q: unknown): Float16Tensor {
  if (outValue !== undefined) return outValue as Float16Tensor;
  if (isFloat16Array(q)) return new (q.constructor as new (b: ArrayBufferLike, o: number, n: number) => Float16Tensor)(target.buffer, 0, target.length);
  return target;
}
