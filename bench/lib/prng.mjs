// Seeded inputs shared by every implementation: mulberry32 uniform -> Box-Muller standard normals.
// Isomorphic (Node and browsers): no imports.

/** mulberry32: a 32-bit state PRNG returning uniforms in [0, 1). */
export function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fills a Float32Array with N(0, 1) samples (Box-Muller, both outputs used). */
export function fillNormal(array, rand) {
  for (let i = 0; i < array.length; i += 2) {
    let u1 = rand();
    if (u1 < 1e-300) u1 = 1e-300;
    const u2 = rand();
    const r = Math.sqrt(-2 * Math.log(u1));
    array[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < array.length) array[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
  return array;
}

export const DEFAULT_SEED = 20240601;

/**
 * q (B,S,D), k (B,T,D), v (B,T,D) for a shape. Each tensor has its own derived seed so that the
 * same shape always gets the same data, whichever implementation asks.
 */
export function makeInputs(shape, seed = DEFAULT_SEED) {
  const { B, S, T, D } = shape;
  const q = fillNormal(new Float32Array(B * S * D), mulberry32(seed ^ 0x51));
  const k = fillNormal(new Float32Array(B * T * D), mulberry32(seed ^ 0x6b));
  const v = fillNormal(new Float32Array(B * T * D), mulberry32(seed ^ 0x76));
  return { q, k, v };
}
