// The one seeded PRNG of the project: mulberry32 uniforms -> Box-Muller standard normals. Tests (through
// tests/js/helpers.mjs), the bench, the tiny-gpt runner's sampling (models/tiny-gpt/runner.mjs) and the demo
// page's seeded data (web/demo/model.js) all draw from here, so a seed means the same sequence everywhere.
// It lives in scripts/lib/, the room of the code that runtime, tests and bench share; the page and the
// Workers load it from the served repository root like any other file. Isomorphic (Node, pages, Workers): no imports.

/** mulberry32: a 32-bit state PRNG returning uniforms in [0, 1), so failures can be replayed from the seed. */
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

/** Fills a Float32Array with N(0, scale²) samples (Box-Muller, both outputs used). */
export function fillNormal(array, rand, scale = 1) {
  for (let i = 0; i < array.length; i += 2) {
    let u1 = rand();
    if (u1 < 1e-300) u1 = 1e-300;
    const u2 = rand();
    const r = Math.sqrt(-2 * Math.log(u1)) * scale;
    array[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < array.length) array[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
  return array;
}

/** A new Float32Array of `length` N(0, scale²) samples. */
export function randomNormal(length, rand, scale = 1) {
  return fillNormal(new Float32Array(length), rand, scale);
}

/**
 * N(0, 1) samples one call at a time (Box-Muller; the sine half is kept for the next call, across arrays).
 * Not fillNormal's sequence, on purpose: it draws 1 − rand() (never 0, so no clamp) and carries the spare
 * over array ends, and the demo's seeded pictures are defined by exactly this stream.
 */
export function normalSampler(rand) {
  let spare = null;
  return () => {
    if (spare !== null) {
      const s = spare;
      spare = null;
      return s;
    }
    const u1 = 1 - rand();
    const u2 = rand();
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
}

export const DEFAULT_SEED = 20240601;

/**
 * q (B,S,H·Dh), k (B,T,Hkv·Dh), v (B,T,Hkv·Dh) for a bench shape (Hkv defaults to H, so k and v are
 * (B,T,D)). Each tensor has its own derived seed so that the same shape always gets the same data,
 * whichever implementation asks.
 */
export function makeInputs(shape, seed = DEFAULT_SEED) {
  const { B, S, T, D } = shape;
  const kvD = (D / shape.H) * (shape.Hkv ?? shape.H);
  const vD = (shape.Dv ?? D / shape.H) * (shape.Hkv ?? shape.H); // v rows: Hkv·Dv (vHeadDim)
  const q = randomNormal(B * S * D, mulberry32(seed ^ 0x51));
  const k = randomNormal(B * T * kvD, mulberry32(seed ^ 0x6b));
  const v = randomNormal(B * T * vD, mulberry32(seed ^ 0x76));
  // A shape with a biasShape gets its bias here too, so every implementation times the same one.
  const bias = shape.biasShape
    ? randomNormal(
        shape.biasShape.reduce((a, b) => a * b, 1),
        mulberry32(seed ^ 0x62),
      )
    : undefined;
  return bias ? { q, k, v, bias } : { q, k, v };
}

/**
 * makeInputs, and the shape as every implementation and the reference see it: a shape with a biasShape
 * carries its drawn bias as shape.bias.
 */
export function shapeWithInputs(shape, seed = DEFAULT_SEED) {
  const inputs = makeInputs(shape, seed);
  return { shape: inputs.bias ? { ...shape, bias: inputs.bias } : shape, inputs };
}
