// IEEE binary16 rounding in plain JS, what the float16 KV cache stores: the JS tests' expectations and the
// bench's plain-JS f16 cache both use it. Isomorphic: no imports.

/**
 * x rounded to IEEE binary16 (nearest, ties to even; overflow to ±Infinity), returned as a number: what a
 * float16 KV cache stores (docs/spec.md Part 3). Exact: float64 scaling by powers of two loses nothing.
 */
export function roundToFloat16(x) {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  const quantum = 2 ** (Math.max(e, -14) - 10); // below 2^-14 the subnormals' fixed 2^-24
  const y = a / quantum;
  const floor = Math.floor(y);
  const rest = y - floor;
  const units = rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
  const rounded = units * quantum;
  return Math.sign(x) * (rounded > 65504 ? Infinity : rounded);
}

/** The binary16 bits of x rounded as roundToFloat16 (NaN: the quiet 0x7e00). */
export function float16Bits(x) {
  if (Number.isNaN(x)) return 0x7e00;
  const h = roundToFloat16(x);
  const sign = h < 0 || Object.is(h, -0) ? 0x8000 : 0;
  const a = Math.abs(h);
  if (a === Infinity) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | Math.round(a / 2 ** -24); // subnormal (or zero)
  const e = Math.floor(Math.log2(a));
  return sign | ((e + 15) << 10) | Math.round((a / 2 ** e - 1) * 1024);
}

/** The number a binary16 code stands for. */
export function float16Value(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const e = (bits >> 10) & 0x1f,
    m = bits & 0x3ff;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
}
