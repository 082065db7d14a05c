// The cache view's computations, no DOM: a seeded sequence decoded token by token into a KV cache of a dtype,
// its error against the project's float64 reference (scripts/lib/reference.mjs), a ring cache beside a full
// one, and samples over a shared prefix beside copies of the prefix. Shapes: N tokens, H query heads sharing
// HKV key/value heads of DH; q (N, H·DH), k and v (N, HKV·DH), row-major.
import { mulberry32, normalSampler } from '../../scripts/lib/prng.mjs';
import { attention } from '../../scripts/lib/reference.mjs';

export const SHAPE = Object.freeze({ H: 4, HKV: 2, DH: 32, SEED: 7 });
const { H, HKV, DH } = SHAPE;

/**
 * N tokens of seeded q, k, v. q is scaled by 2 so that rows are peaked enough for the weights' error to
 * show; k and v are N(0, 1). `salt` gives another sequence of the same seed.
 */
export function sequence(N, salt = 0) {
  const normal = normalSampler(mulberry32(SHAPE.SEED + 7919 * salt));
  const make = (width, gain) => Float32Array.from({ length: N * width }, () => gain * normal());
  return { N, q: make(H * DH, 2), k: make(HKV * DH, 1), v: make(HKV * DH, 1) };
}

const row = (x, t, width) => x.subarray(t * width, (t + 1) * width);

/** IEEE binary16 bits to a number (a float16 cache's read() gives the stored bits). */
function halfToNumber(bits) {
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  const sign = bits & 0x8000 ? -1 : 1;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

const asFloat32 = (x) => (x instanceof Uint16Array ? Float32Array.from(x, halfToNumber) : x);

/** The float64 reference over the float32 inputs: out (N, H·DH) and weights (H, N, N), both float64. */
export function reference(seq) {
  const { N } = seq;
  const weights = new Float64Array(H * N * N);
  const out = new Float64Array(N * H * DH);
  const shape = { B: 1, S: N, T: N, D: H * DH, H, Hkv: HKV, causal: true };
  attention(seq.q, seq.k, seq.v, shape, out, { weights });
  return { out, weights };
}

/**
 * Decodes `seq` one token per attend into a cache of `cacheOptions` (dtype, arithmetic). Returns its output
 * (N, H·DH), the bytes it holds and the weights its stored keys give (H, N, N): mha.attentionWeights of
 * every query over the keys as the cache holds them (read() decodes them exactly).
 */
export function decode(mha, seq, cacheOptions) {
  const { N } = seq;
  const cache = mha.createKVCache({ batch: 1, numKvHeads: HKV, headDim: DH, capacity: N, ...cacheOptions });
  try {
    const out = new Float32Array(N * H * DH);
    for (let t = 0; t < N; t++) {
      const step = cache.attend(row(seq.q, t, H * DH), row(seq.k, t, HKV * DH), row(seq.v, t, HKV * DH), {
        numHeads: H,
      });
      out.set(step, t * H * DH);
    }
    const stored = asFloat32(cache.read().k);
    const dims = { batch: 1, seqLen: N, dModel: H * DH, numHeads: H, numKvHeads: HKV, causal: true };
    return { out, bytes: cache.bytes, weights: mha.attentionWeights(seq.q, stored, dims) };
  } finally {
    cache.free();
  }
}

/**
 * How far a run is from the reference: the largest |Δ| of the weights and of the output, and the map of the
 * weights' error, (N, N): the largest over the heads of each (query, key).
 */
export function errors(run, ref, N) {
  const map = new Float64Array(N * N);
  let weights = 0;
  for (let h = 0; h < H; h++)
    for (let c = 0; c < N * N; c++) {
      const d = Math.abs(run.weights[h * N * N + c] - ref.weights[h * N * N + c]);
      if (d > map[c]) map[c] = d;
      if (d > weights) weights = d;
    }
  let out = 0;
  let outMax = 0; // the largest |output| of the reference: the scale an output error is read against
  for (let i = 0; i < run.out.length; i++) {
    out = Math.max(out, Math.abs(run.out[i] - ref.out[i]));
    outMax = Math.max(outMax, Math.abs(ref.out[i]));
  }
  return { weights, out, outMax, map };
}

/**
 * A ring cache of W + 1 slots with window [W, 0] beside a cache holding every token with the same window:
 * per step the tokens the ring still holds ([length − stored, length)), and the largest |Δ| of their outputs.
 */
export function ringRun(mha, seq, W, dtype) {
  const { N } = seq;
  const options = { batch: 1, numKvHeads: HKV, headDim: DH, dtype };
  const ring = mha.createKVCache({ ...options, capacity: W + 1, ring: true });
  const full = mha.createKVCache({ ...options, capacity: N });
  try {
    const held = [];
    let difference = 0;
    for (let t = 0; t < N; t++) {
      const args = [row(seq.q, t, H * DH), row(seq.k, t, HKV * DH), row(seq.v, t, HKV * DH)];
      const a = ring.attend(...args, { numHeads: H, window: [W, 0] });
      const b = full.attend(...args, { numHeads: H, window: [W, 0] });
      for (let i = 0; i < a.length; i++) difference = Math.max(difference, Math.abs(a[i] - b[i]));
      const length = ring.lengths[0];
      held.push({ from: length - ring.stored[0], to: length });
    }
    return { held, difference, ringBytes: ring.bytes, fullBytes: full.bytes, capacity: ring.capacity };
  } finally {
    ring.free();
    full.free();
  }
}

/**
 * `samples` continuations of `prompt` (M own tokens each): one prefix cache read by a batch cache, beside one
 * cache per sample holding its own copy of the prompt. Returns both byte counts and the largest |Δ| of outputs.
 */
export function prefixRun(mha, prompt, samples, M, dtype) {
  const P = prompt.N;
  const options = { numKvHeads: HKV, headDim: DH, dtype };
  const own = Array.from({ length: samples }, (_, b) => sequence(M, b + 1));
  const stack = (key, t, width) => {
    const x = new Float32Array(samples * width);
    own.forEach((s, b) => x.set(row(s[key], t, width), b * width));
    return x;
  };
  const caches = [];
  const make = (o) => {
    const cache = mha.createKVCache({ ...options, ...o });
    caches.push(cache);
    return cache;
  };
  try {
    const prefix = make({ batch: 1, capacity: P });
    prefix.attend(prompt.q, prompt.k, prompt.v, { numHeads: H });
    const shared = make({ batch: samples, capacity: M });
    const copies = own.map(() => make({ batch: 1, capacity: P + M }));
    for (const copy of copies) copy.attend(prompt.q, prompt.k, prompt.v, { numHeads: H });
    let difference = 0;
    for (let t = 0; t < M; t++) {
      const out = shared.attend(stack('q', t, H * DH), stack('k', t, HKV * DH), stack('v', t, HKV * DH), {
        numHeads: H,
        prefix,
      });
      copies.forEach((copy, b) => {
        const s = own[b];
        const alone = copy.attend(row(s.q, t, H * DH), row(s.k, t, HKV * DH), row(s.v, t, HKV * DH), { numHeads: H });
        for (let i = 0; i < alone.length; i++)
          difference = Math.max(difference, Math.abs(alone[i] - out[b * H * DH + i]));
      });
    }
    return {
      prefixBytes: prefix.bytes,
      sharedBytes: shared.bytes,
      copiesBytes: copies.reduce((sum, c) => sum + c.bytes, 0),
      difference,
    };
  } finally {
    for (const cache of caches) cache.free();
  }
}
