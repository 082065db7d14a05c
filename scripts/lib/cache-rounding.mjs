// What a KV cache of each dtype stores for float32 values, read back as float32 (docs/spec.md 4.8): the
// expected values of the tests and benchmarks that check a cache's results in JS. Isomorphic, no imports
// but float16's.
import { roundToFloat16 } from './float16.mjs';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** x rounded to bfloat16 (nearest even; NaN stays NaN, quiet) and widened back. */
export function roundToBfloat16(x) {
  f32[0] = x;
  const bits = u32[0];
  if ((bits & 0x7fffffff) > 0x7f800000) u32[0] = (bits | 0x00400000) & 0xffff0000;
  else u32[0] = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) << 16; // finite past the largest: inf
  return f32[0];
}

/**
 * (rows, heads·dim) float32 rows quantized as an int8 cache does (q8_0: blocks of 32 along each head's
 * dim, scale = amax / 127 in float32, q = x / scale rounded to nearest even, clamped to ±127) and read
 * back as float32 q·scale, into a new Float32Array. Finite inputs only (an int8 cache refuses others).
 * maxQ 7: an int4 cache (docs/spec.md 5.1: scale = amax / 7, q clamped to ±7).
 */
export function roundToInt8Rows(x, heads, dim, maxQ = 127) {
  if (heads <= 0) throw new RangeError(`roundToInt8Rows: heads: expected a positive integer, got ${heads}`);
  const out = new Float32Array(x.length);
  for (let row = 0; row < x.length; row += dim) {
    for (let b0 = 0; b0 < dim; b0 += 32) {
      const end = Math.min(dim, b0 + 32);
      let amax = 0;
      for (let i = row + b0; i < row + end; i++) amax = Math.max(amax, Math.abs(x[i]));
      const scale = Math.fround(amax / maxQ);
      for (let i = row + b0; i < row + end; i++) {
        // | 0: q is an integer, which has no -0 (a small negative value reads back as +0).
        const q = scale === 0 ? 0 : Math.max(-maxQ, Math.min(maxQ, roundHalfEven(Math.fround(x[i] / scale)))) | 0;
        out[i] = Math.fround(q * scale);
      }
    }
  }
  return out;
}

function roundHalfEven(v) {
  const r = Math.round(v); // halves up
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** (rows, heads·dim) values as a cache of `dtype` reads them back. */
export function roundAsStored(x, dtype, heads, dim) {
  if (dtype === 'float32') return Float32Array.from(x);
  if (dtype === 'float16') return Float32Array.from(x, roundToFloat16);
  if (dtype === 'bfloat16') return Float32Array.from(x, roundToBfloat16);
  if (dtype === 'int8') return roundToInt8Rows(x, heads, dim);
  if (dtype === 'int4') return roundToInt8Rows(x, heads, dim, 7);
  throw new RangeError(
    `roundAsStored: dtype: expected 'float32', 'float16', 'bfloat16', 'int8' or 'int4', got ${dtype}`,
  );
}
