// The PyTorch golden sets (tests/golden/, format in its README) run case by case inside any JavaScript
// engine: a browser page (tests/browser/golden.test.mjs fetches the files from the test server) or the
// JavaScriptCore shell (tests/jsc/ reads them with jsc's readFile). The caller brings the instance and a
// `read(fileName)` for the set's folder; this module decides what to run from cases.json alone (the shape,
// the options, which files a case has) and returns JSON-safe summaries, which the Node side asserts.
// It needs nothing but the ECMAScript built-ins, so it runs in a page and in a bare shell alike.

/**
 * The sets the browser and jsc suites run: v1, and v2 (the options of docs/spec.md Part 2, and its
 * `cache` cases: Part 3's KV cache, one attend per step).
 */
export const GOLDEN_SETS = Object.freeze(['v1', 'v2']);

/** Whether a case is one stateless call (every v1 case), not a sequence of KV-cache steps. */
export const isStateless = (c) => (c.kind ?? 'stateless') === 'stateless';

/** Rows [from, from + n) of each batch item of a (B, rows, width) tensor, as a new (B, n, width) tensor. */
export function sliceRows(x, batch, rows, width, from, n) {
  const out = new Float32Array(batch * n * width);
  for (let b = 0; b < batch; b++) out.set(x.subarray((b * rows + from) * width, (b * rows + from + n) * width), b * n * width);
  return out;
}

/**
 * Runs cache case `c` (q (B, S, H·Dh); k, v (B, S, Hkv·Dh)): a cache of its capacity and dtype, then one
 * `attend` per entry of c.cache.steps, each with that many new tokens. Returns the steps' outputs stacked
 * as (B, S, H·Dh) and the cache length seen after each step. `stage` may turn each step's q, k and v
 * into heap tensors; `release` then frees them.
 */
export function runCacheCase(mha, c, q, k, v, { stage = (x) => x, release = () => {} } = {}) {
  const { batch: B, seqLen: S, numHeads: H, headDim: Dh } = c;
  const Hkv = c.options.numKvHeads ?? H;
  const options = { numHeads: H };
  if (c.options.causal !== undefined) options.causal = c.options.causal;
  if (c.options.window) options.window = callOptions(c).window;
  const cache = mha.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity: c.cache.capacity, dtype: c.cache.dtype });
  const out = new Float32Array(B * S * H * Dh);
  const lengths = [];
  try {
    let t = 0;
    for (const n of c.cache.steps) {
      const parts = [sliceRows(q, B, S, H * Dh, t, n), sliceRows(k, B, S, Hkv * Dh, t, n), sliceRows(v, B, S, Hkv * Dh, t, n)].map(stage);
      try {
        const step = cache.attend(parts[0], parts[1], parts[2], options);
        for (let b = 0; b < B; b++) out.set(step.subarray(b * n * H * Dh, (b + 1) * n * H * Dh), (b * S + t) * H * Dh);
      } finally {
        parts.forEach(release);
      }
      t += n;
      lengths.push(cache.length);
    }
  } finally {
    cache.free();
  }
  return { out, lengths };
}

/** In a page: the `read` of golden set `set` (tests/golden/<set>/), fetched from the test server. */
export const fetchReader = (set) => async (file) => {
  const response = await fetch(`/tests/golden/${set}/${file}`);
  if (!response.ok) throw new Error(`/tests/golden/${set}/${file}: HTTP ${response.status}`);
  return response.arrayBuffer();
};

/** Reads file `role` of case `c` as the typed array the role implies: mask uint8, all others float32. */
async function readRole(read, c, role) {
  const bytes = await read(c.files[role]);
  const buffer = bytes instanceof ArrayBuffer ? bytes : bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  return role === 'mask' ? new Uint8Array(buffer) : new Float32Array(buffer);
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
    } else if (!Object.is(actual[i], expected[i]) && !(Number.isNaN(actual[i]) && Number.isNaN(expected[i])) && specialMismatch < 0) {
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
  const problem = r.specialMismatch >= 0 ? `${what}: NaN/infinity position differs at element ${r.specialMismatch}`
    : r.maxError <= tolerance ? undefined : `${what}: max error ${r.maxError} > tolerance ${tolerance}`;
  return { ok: problem === undefined, problem, maxError: r.maxError, tolerance, ratio: r.maxError / tolerance, specialMismatch: r.specialMismatch };
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
      if (!Object.is(got, want) && !(Number.isNaN(got) && Number.isNaN(want))) problem = `lse[${i}] = ${got}, expected ${want} exactly`;
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

const sameBits = (a, b) => a.length === b.length &&
  new Uint32Array(a.buffer, a.byteOffset, a.length).every((x, i) => x === new Uint32Array(b.buffer, b.byteOffset, b.length)[i]);

/** cases.json writes an unbounded window side as the string "Infinity". */
function callOptions(c) {
  const options = { ...(c.options ?? {}) };
  if (options.window) options.window = options.window.map((x) => (x === 'Infinity' ? Infinity : x));
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
  const record = (what, check) => checks.push({ what, pass: check.ok, maxError: check.maxError, tolerance: check.tolerance,
    specialMismatch: check.specialMismatch, problem: check.problem });
  const has = (role) => Object.hasOwn(c.files, role);
  const [q, k, v] = await Promise.all(['q', 'k', 'v'].map((role) => readRole(read, c, role)));
  const shape = { batch: c.batch, seqLen: c.seqLen, kvSeqLen: c.kvSeqLen, dModel: c.dModel, numHeads: c.numHeads };
  const options = { ...shape, ...callOptions(c) };
  if (has('mask')) options.mask = await readRole(read, c, 'mask');
  if (has('bias')) options.bias = await readRole(read, c, 'bias');
  const [out64, out32] = await Promise.all(['out64', 'out32'].map((role) => readRole(read, c, role)));
  if (!isStateless(c)) {
    const { out, lengths } = runCacheCase(mha, c, q, k, v);
    onOutput(out);
    let total = 0;
    const expectedLengths = c.cache.steps.map((n) => (total += n));
    checks.push({ what: `cache length after each step is ${expectedLengths.join(', ')}`, pass: lengths.join() === expectedLengths.join() });
    record(`KV cache (${c.cache.dtype}, steps ${c.cache.steps.join('+')}) vs out64`, checkOut(out, out64, out32));
    return { name: c.name, checks };
  }

  const lse = has('lse64') ? new Float32Array(c.batch * c.numHeads * c.seqLen) : undefined;
  const out = mha.multiHeadAttention(q, k, v, lse ? { ...options, lse } : options);
  onOutput(out);
  record('multiHeadAttention vs out64', checkOut(out, out64, out32));
  if (lse) record('lse vs lse64', checkLse(lse, await readRole(read, c, 'lse64')));
  if (has('weights64')) {
    record('attentionWeights vs weights64', checkWeights(mha.attentionWeights(q, k, options), await readRole(read, c, 'weights64')));
  }
  if (has('split_q')) {
    const headShape = { batch: c.batch, seqLen: c.seqLen, dModel: c.dModel, numHeads: c.numHeads };
    const split = mha.splitHeads(q, headShape);
    checks.push({ what: 'splitHeads equals split_q bit for bit, mergeHeads inverts it',
      pass: sameBits(split, await readRole(read, c, 'split_q')) && sameBits(mha.mergeHeads(split, headShape), q) });
  }
  return { name: c.name, checks };
}

/** Runs every case of a set (its parsed cases.json) in order; summaries as runGoldenCase's. */
export async function runGoldenSet(mha, cases, read) {
  const results = [];
  for (const c of cases) results.push(await runGoldenCase(mha, c, read));
  return results;
}
