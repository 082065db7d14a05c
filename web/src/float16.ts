// IEEE binary16 tensors (docs/spec.md 4.2) as the API takes them: Uint16Array bits or the engine's
// Float16Array, viewed as bits. The widening to float32 as they are staged and the one rounding of a
// result to binary16 run in the core (src/mha/core/f16_tensor.hpp), called by staging.ts.
import type { Float16Tensor } from './tensor-types.js';

/** The engine's Float16Array constructor (ES2025), or undefined where it has none (Node 20, older engines). */
export const Float16ArrayCtor:
  | (new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView & { length: number })
  | undefined = (globalThis as { Float16Array?: never }).Float16Array;

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
  if (isFloat16Array(q))
    return new (q.constructor as new (b: ArrayBufferLike, o: number, n: number) => Float16Tensor)(
      target.buffer,
      0,
      target.length,
    );
  return target;
}
