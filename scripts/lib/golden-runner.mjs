// The PyTorch golden sets (tests/golden/, format in its README) run case by case inside any JavaScript
// engine: a browser page (tests/browser/golden.test.mjs fetches the files from the test server) or the
// JavaScriptCore shell (tests/jsc/ reads them with jsc's readFile). The caller brings the instance and a
// `read(fileName)` for the set's folder; this module decides what to run from cases.json alone (the shape,
// the options, which files a case has) and returns JSON-safe summaries, which the Node side asserts.
// It needs nothing but the ECMAScript built-ins, so it runs in a page and in a bare shell alike. The v4
// cases (prefix, reorder, ring, int4, merge) run through golden-serving.mjs.
import { runMergeCase, runServingCase } from './golden-serving.mjs';

/**
 * The sets the browser and jsc suites run: v1, v2 (the options of docs/spec.md Part 2, and its `cache`
 * cases: Part 3's KV cache, one attend per step), v3 (Part 4: vHeadDim, float16 tensors, stages, sinks,
 * rope, and caches with them) and v4 (Part 5: shared prefixes, merged attention states, reorder, ring
 * caches; and the int4 cache, whose cases run where the build has that dtype).
 */
export const GOLDEN_SETS = Object.freeze(['v1', 'v2', 'v3', 'v4']);

/** Cases a build cannot run yet, skipped by name (runGoldenCase says why); none today. */
export const SKIPPED_CASES = Object.freeze({});

/** Whether a case is one stateless call (every v1 case), not a sequence of KV-cache steps. */
export const isStateless = (c) => (c.kind ?? 'stateless') === 'stateless';

/** Rows [from, from + n) of each batch item of a (B, rows, width) tensor, as a new (B, n, width) tensor of its type. */
export function sliceRows(x, batch, rows, width, from, n) {
  const out = new x.constructor(batch * n * width);
  for (let b = 0; b < batch; b++)
    out.set(x.subarray((b * rows + from) * width, (b * rows + from + n) * width), b * n * width);
  return out;
}

/**
 * Runs cache case `c` (q (B, S, H·Dh); k, v (B, S, Hkv·Dh)): a cache of its capacity and dtype, then one
 * `attend` per entry of c.cache.steps, each with that many new tokens. Returns the steps' outputs stacked
 * as (B, S, H·Dh) and the cache length seen after each step. `stage` may turn each step's q, k and v
 * into heap tensors; `release` then frees them. `stored` is the cache's contents read back after the
 * last step (KVCache.read: float32 for bfloat16 and int8 caches), for the cases with kread and vread.
 */
export function runCacheCase(mha, c, q, k, v, { stage = (x) => x, release = () => {}, rope } = {}) {
  const { batch: B, seqLen: S, numHeads: H, headDim: Dh } = c;
  const Hkv = c.options.numKvHeads ?? H;
  const Dv = c.options.vHeadDim ?? Dh;
  const options = { numHeads: H };
  for (const key of ['causal', 'sinks', 'dtype']) if (c.options[key] !== undefined) options[key] = c.options[key];
  if (c.options.window) options.window = c.options.window.map((x) => (x === 'Infinity' ? Infinity : x));
  // rope: the tables as read from the case's files (v3 README: its cos and sin name file roles).
  if (c.options.rope)
    options.rope = {
      cos: rope.cos,
      sin: rope.sin,
      rotaryDim: c.options.rope.rotaryDim,
      interleaved: c.options.rope.interleaved,
    };
  const cacheOptions = { batch: B, numKvHeads: Hkv, headDim: Dh, capacity: c.cache.capacity, dtype: c.cache.dtype };
  if (c.options.vHeadDim !== undefined) cacheOptions.vHeadDim = Dv;
  const cache = mha.createKVCache(cacheOptions);
  const out = new q.constructor(B * S * H * Dv);
  const lengths = [];
  try {
    let t = 0;
    for (const [i, n] of c.cache.steps.entries()) {
      const parts = [
        sliceRows(q, B, S, H * Dh, t, n),
        sliceRows(k, B, S, Hkv * Dh, t, n),
        sliceRows(v, B, S, Hkv * Dv, t, n),
      ].map(stage);
      // A ragged case (docs/spec.md 4.6) says per step how many of the n rows of each sequence are real.
      const stepOptions = c.cache.newTokens ? { ...options, newTokens: c.cache.newTokens[i] } : options;
      try {
        const step = cache.attend(parts[0], parts[1], parts[2], stepOptions);
        for (let b = 0; b < B; b++) out.set(step.subarray(b * n * H * Dv, (b + 1) * n * H * Dv), (b * S + t) * H * Dv);
      } finally {
        parts.forEach(release);
      }
      t += n;
      lengths.push(c.cache.newTokens ? [...cache.lengths] : cache.length);
    }
    return { out, lengths, stored: cache.read() };
  } finally {
    cache.free();
  }
}

/** In a page: the `read` of golden set `set` (tests/golden/<set>/), fetched from the test server. */
export const fetchReader = (set) => async (file) => {
  const response = await fetch(`/tests/golden/${set}/${file}`);
  if (!response.ok) throw new Error(`/tests/golden/${set}/${file}: HTTP ${response.status}`);
  return response.arrayBuffer();
};

/**
 * Reads file `role` of case `c` as the typed array its name implies: `.f16` Uint16Array (binary16 bits),
 * `.u8` and the mask Uint8Array, all others float32.
 */
async function readRole(read, c, role) {
  const file = c.files[role];
  const bytes = await read(file);
  const buffer =
    bytes instanceof ArrayBuffer ? bytes : bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  if (file.endsWith('.f16')) return new Uint16Array(buffer);
  return role === 'mask' || file.endsWith('.u8') ? new Uint8Array(buffer) : new Float32Array(buffer);
}

/** The float32 value of binary16 bits h, exactly. */
export function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >>> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0x1f) return mantissa === 0 ? sign * Infinity : NaN;
  return sign * (exponent === 0 ? mantissa * 2 ** -24 : (1024 + mantissa) * 2 ** (exponent - 25));
}

/** A Uint16Array of binary16 bits widened to a new Float32Array. */
export const widenHalves = (bits) => Float32Array.from(bits, halfToFloat);

/** The size of one binary16 step at |x| (the spacing of the binary16 numbers around it). */
function halfStep(x) {
  const a = Math.abs(x);
  return a < 2 ** -14 ? 2 ** -24 : 2 ** (Math.floor(Math.log2(a)) - 10);
}

/** binary16 bits as integers in the order of their values (−0 and +0 adjacent), for counting steps. */
const halfOrder = (h) => (h & 0x8000 ? -(h & 0x7fff) : h);

/**
 * A binary16 out (docs/spec.md 4.2; tests/golden/README.md, v3 dtype float16): each element within one
 * binary16 step of out64 (the float64 result rounded once to binary16), NaN where out64 is NaN, the same
 * infinities; and its float32 widening within the accuracy rule's tolerance (against out64f32, with out32)
 * plus one binary16 step of the element. maxError / tolerance are the widening's worst element's.
 */
export function checkHalfOut(out, out64, out64f32, out32) {
  const tolerance = Math.max(
    1e-5 * Math.max(1, compare(out64f32, out64f32).maxExpected),
    2 * compare(out32, out64f32).maxError,
  );
  let problem;
  let worst = { ratio: 0, error: 0, tolerance };
  for (let i = 0; i < out64.length && problem === undefined; i++) {
    const [got, want] = [halfToFloat(out[i]), halfToFloat(out64[i])];
    if (!Number.isFinite(want) || !Number.isFinite(got)) {
      if (!Object.is(got, want) && !(Number.isNaN(got) && Number.isNaN(want)))
        problem = `out[${i}] = ${got}, expected ${want} exactly`;
      continue;
    }
    if (Math.abs(halfOrder(out[i]) - halfOrder(out64[i])) > 1)
      problem = `out[${i}] = ${got}, more than one binary16 step from out64 ${want}`;
    const error = Math.abs(got - out64f32[i]);
    const allowed = tolerance + halfStep(out64f32[i]);
    if (error > allowed)
      problem = `out[${i}] = ${got}: |out - out64f32| = ${error} > tolerance ${tolerance} + one binary16 step`;
    if (error / allowed > worst.ratio) worst = { ratio: error / allowed, error, tolerance: allowed };
  }
  if (out.length !== out64.length) problem = `out has ${out.length} elements, expected ${out64.length}`;
  return {
    ok: problem === undefined,
    problem,
    ratio: worst.ratio,
    tolerance: worst.tolerance,
    maxError: worst.error,
    specialMismatch: -1,
  };
}

/** Scores of a stage (docs/spec.md 4.3): each within 1e-5 · max(1, |expected|), ±Infinity and NaN exact (the lse rule). */
export function checkScores(scores, expected) {
  return checkLse(scores, expected);
}

/**
 * Largest |actual - expected| over the positions where expected is finite, the largest |expected| there,
 * and the first position where actual is not NaN / not the same infinity while expected is, or is not
 * finite while expected is (-1: none).
 */
export function compare(actual, expected) {
  let maxError = 0;
  let maxExpected = 0;
  let specialMismatch = -1;
  for (let i = 0; i < expected.length; i++) {
    if (Number.isFinite(expected[i])) {
      if (!Number.isFinite(actual[i]) && specialMismatch < 0) specialMismatch = i;
      maxError = Math.max(maxError, Math.abs(actual[i] - expected[i]));
      maxExpected = Math.max(maxExpected, Math.abs(expected[i]));
    } else if (
      !Object.is(actual[i], expected[i]) &&
      !(Number.isNaN(actual[i]) && Number.isNaN(expected[i])) &&
      specialMismatch < 0
    ) {
      specialMismatch = i;
    }
  }
  if (actual.length !== expected.length) specialMismatch = Math.min(actual.length, expected.length);
  return { maxError, maxExpected, specialMismatch };
}

// The accuracy rules of docs/spec.md ("Accuracy"), the project's only copy: the Node tests, the bench,
// the pages and jsc all check through these. Each returns { ok, problem (why not), maxError, tolerance,
// ratio = maxError / tolerance }.
function verdict(r, tolerance, what) {
  const problem =
    r.specialMismatch >= 0
      ? `${what}: NaN/infinity position differs at element ${r.specialMismatch}`
      : r.maxError <= tolerance
        ? undefined
        : `${what}: max error ${r.maxError} > tolerance ${tolerance}`;
  return {
    ok: problem === undefined,
    problem,
    maxError: r.maxError,
    tolerance,
    ratio: r.maxError / tolerance,
    specialMismatch: r.specialMismatch,
  };
}

/** out against out64: max |out - out64| <= max(1e-5 · max(1, max |out64|), 2 · max |out32 - out64|). */
export function checkOut(out, out64, out32) {
  const r = compare(out, out64);
  return verdict(r, Math.max(1e-5 * Math.max(1, r.maxExpected), 2 * compare(out32, out64).maxError), 'out');
}

/** Weights: within 1e-5 of weights64. */
export function checkWeights(weights, weights64) {
  return verdict(compare(weights, weights64), 1e-5, 'weights');
}

/**
 * lse: each element within 1e-5 · max(1, |lse64|); -Infinity (and NaN) exactly where lse64 has it. The
 * tolerance is per element, so maxError and tolerance are those of the element with the largest ratio.
 */
export function checkLse(lse, lse64) {
  let worst = { ratio: 0, error: 0, tolerance: 1e-5 };
  let problem;
  for (let i = 0; i < lse64.length && problem === undefined; i++) {
    const [got, want] = [lse[i], lse64[i]];
    if (!Number.isFinite(want) || !Number.isFinite(got)) {
      if (!Object.is(got, want) && !(Number.isNaN(got) && Number.isNaN(want)))
        problem = `lse[${i}] = ${got}, expected ${want} exactly`;
      continue;
    }
    const error = Math.abs(got - want);
    const tolerance = 1e-5 * Math.max(1, Math.abs(want));
    if (error > tolerance) problem = `lse[${i}] = ${got}, expected ${want} within 1e-5·max(1, |lse|)`;
    if (error / tolerance > worst.ratio) worst = { ratio: error / tolerance, error, tolerance };
  }
  if (lse.length !== lse64.length) problem = `lse has ${lse.length} elements, expected ${lse64.length}`;
  return { ok: problem === undefined, problem, ratio: worst.ratio, tolerance: worst.tolerance, maxError: worst.error };
}

const sameBits = (a, b) =>
  a.length === b.length &&
  new Uint32Array(a.buffer, a.byteOffset, a.length).every(
    (x, i) => x === new Uint32Array(b.buffer, b.byteOffset, b.length)[i],
  );

/** cases.json writes an unbounded window side as the string "Infinity"; rope's cos and sin are file roles (`rope`: the tables read). */
function callOptions(c, rope) {
  const options = { ...(c.options ?? {}) };
  if (options.window) options.window = options.window.map((x) => (x === 'Infinity' ? Infinity : x));
  if (options.rope)
    options.rope = {
      cos: rope.cos,
      sin: rope.sin,
      rotaryDim: options.rope.rotaryDim,
      interleaved: options.rope.interleaved,
    };
  return options;
}

/**
 * Runs golden case `c` on `mha` and checks it with docs/spec.md's tolerances ("Accuracy"):
 * out within max(1e-5 · max(1, max|out64|), 2 · max|out32 − out64|) of out64, weights within 1e-5 of
 * weights64, each lse element within 1e-5 · max(1, |lse64|), split_q bit for bit; NaN and ±Infinity positions
 * exact (checkOut, checkWeights, checkLse).
 * Returns { name, checks: [{ what, pass, maxError?, tolerance?, specialMismatch? }] }; `onOutput` receives
 * the output checked against out64 (the stacked steps of a cache case), for callers that compare bits.
 */
export async function runGoldenCase(mha, c, read, onOutput = () => {}) {
  const checks = [];
  const record = (what, check) =>
    checks.push({
      what,
      pass: check.ok,
      maxError: check.maxError,
      tolerance: check.tolerance,
      specialMismatch: check.specialMismatch,
      problem: check.problem,
    });
  if (Object.hasOwn(SKIPPED_CASES, c.name)) return { name: c.name, skipped: SKIPPED_CASES[c.name], checks };
  const rules = { callOptions, checkLse, checkOut, readRole, sameBits, sliceRows };
  if (c.kind === 'serving') return runServingCase(mha, c, read, onOutput, rules);
  if (c.kind === 'merge') return runMergeCase(mha, c, read, onOutput, rules);
  const has = (role) => Object.hasOwn(c.files, role);
  const [q, k, v] = await Promise.all(['q', 'k', 'v'].map((role) => readRole(read, c, role)));
  const rope = c.options?.rope
    ? { cos: await readRole(read, c, c.options.rope.cos), sin: await readRole(read, c, c.options.rope.sin) }
    : undefined;
  const shape = { batch: c.batch, seqLen: c.seqLen, kvSeqLen: c.kvSeqLen, dModel: c.dModel, numHeads: c.numHeads };
  const options = { ...shape, ...callOptions(c, rope) };
  if (has('mask')) options.mask = await readRole(read, c, 'mask');
  if (has('bias')) options.bias = await readRole(read, c, 'bias');
  const [out64, out32] = await Promise.all(['out64', 'out32'].map((role) => readRole(read, c, role)));
  const out64f32 = has('out64f32') ? await readRole(read, c, 'out64f32') : undefined;
  const half = out64 instanceof Uint16Array;
  const checkAnyOut = (out) => (half ? checkHalfOut(out, out64, out64f32, out32) : checkOut(out, out64, out32));
  if (!isStateless(c)) {
    const { out, lengths, stored } = runCacheCase(mha, c, q, k, v, { rope });
    onOutput(out);
    if (has('kread')) {
      // docs/spec.md 4.8: the stored values read back are exactly what the spec's rounding gives.
      const [kread, vread] = await Promise.all(['kread', 'vread'].map((role) => readRole(read, c, role)));
      checks.push({
        what: `KVCache.read equals kread and vread bit for bit (${c.cache.dtype})`,
        pass: sameBits(stored.k, kread) && sameBits(stored.v, vread),
      });
    }
    let total = 0;
    const expectedLengths = c.cache.lengths ?? c.cache.steps.map((n) => (total += n));
    const shown = JSON.stringify(expectedLengths);
    checks.push({ what: `cache length(s) after each step: ${shown}`, pass: JSON.stringify(lengths) === shown });
    const ragged = c.cache.newTokens ? `, newTokens ${JSON.stringify(c.cache.newTokens)}` : '';
    record(`KV cache (${c.cache.dtype}, steps ${c.cache.steps.join('+')}${ragged}) vs out64`, checkAnyOut(out));
    return { name: c.name, checks };
  }

  const lse = has('lse64') ? new Float32Array(c.batch * c.numHeads * c.seqLen) : undefined;
  const out = mha.multiHeadAttention(q, k, v, lse ? { ...options, lse } : options);
  {
    onOutput(out);
    record(
      half ? 'multiHeadAttention binary16 out vs out64 and out64f32' : 'multiHeadAttention vs out64',
      checkAnyOut(out),
    );
    if (lse) record('lse vs lse64', checkLse(lse, await readRole(read, c, 'lse64')));
    if (half && typeof Float16Array === 'function') {
      // The same call with Float16Array tensors (where the engine has them) gives the same bits.
      const asF16 = (bits) => new Float16Array(bits.buffer, bits.byteOffset, bits.length);
      const out16 = mha.multiHeadAttention(asF16(q), asF16(k), asF16(v), options);
      const bits16 = new Uint16Array(out16.buffer, out16.byteOffset, out16.length);
      checks.push({
        what: 'multiHeadAttention with Float16Array tensors returns a Float16Array of the same bits',
        pass: out16 instanceof Float16Array && bits16.length === out.length && bits16.every((x, i) => x === out[i]),
      });
    }
  }
  // attentionWeights takes float32 q and k and has no v: a float16 case's inputs widened, no dtype or vHeadDim.
  const { dtype: _dtype, vHeadDim: _vHeadDim, ...weightsOptions } = options;
  const [q32, k32] = half ? [widenHalves(q), widenHalves(k)] : [q, k];
  if (has('weights64')) {
    record(
      'attentionWeights vs weights64',
      checkWeights(mha.attentionWeights(q32, k32, weightsOptions), await readRole(read, c, 'weights64')),
    );
  }
  for (const stage of ['scaled', 'softcapped', 'biased']) {
    const role = `stage_${stage}64`;
    if (!has(role)) continue;
    record(
      `attentionWeights stage '${stage}' vs ${role}`,
      checkScores(mha.attentionWeights(q32, k32, { ...weightsOptions, stage }), await readRole(read, c, role)),
    );
  }
  if (has('split_q')) {
    const headShape = { batch: c.batch, seqLen: c.seqLen, dModel: c.dModel, numHeads: c.numHeads };
    const split = mha.splitHeads(q, headShape);
    checks.push({
      what: 'splitHeads equals split_q bit for bit, mergeHeads inverts it',
      pass: sameBits(split, await readRole(read, c, 'split_q')) && sameBits(mha.mergeHeads(split, headShape), q),
    });
  }
  return { name: c.name, checks };
}

/** Runs every case of a set (its parsed cases.json) in order; summaries as runGoldenCase's. */
export async function runGoldenSet(mha, cases, read) {
  const results = [];
  for (const c of cases) results.push(await runGoldenCase(mha, c, read));
  return results;
}
