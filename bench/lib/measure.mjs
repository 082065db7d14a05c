// One (implementation, shape) measurement: seeded inputs, plain-JS reference rows, load, first call,
// correctness check of that first output (before any timing), then warm-up and adaptive repeats.
// Isomorphic (Node child process and Chromium page).
import { shapeWithInputs, DEFAULT_SEED } from '../../scripts/lib/prng.mjs';
import { attentionRows, sampleRows, compareRows } from '../../scripts/lib/reference.mjs';
import { flopsOf } from './shapes.mjs';

/** Full-output check against plain JS when the reference costs at most this many FLOPs. */
export const FULL_CHECK_FLOPS = 6e8;
/** Otherwise check this many FLOPs' worth of sampled query rows (16..128 rows). */
export const SAMPLED_CHECK_FLOPS = 1e9;
/** plain-js runs the whole shape only up to this many FLOPs; above, a row subset, extrapolated. */
export const PLAIN_FULL_FLOPS = 2.5e9;
export const PLAIN_SUBSET_FLOPS = 6e8;
/** A row whose first call takes longer than this (or the implementation's `singleCallOverMs`) is timed by that call alone. */
export const SINGLE_CALL_MS = 20000;

const now = () => performance.now();

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function quantile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.round(p * (s.length - 1))))];
}

/**
 * @param {object} o
 * @param {string} o.impl implementation name
 * @param {(shape, opts) => Promise<{run, info, dispose}>} o.load
 * @param {object} o.shape
 * @param {number} [o.budgetMs] time budget for the timed repeats
 * @param {(phase: string) => void} [o.onPhase]
 */
export async function measure({
  impl,
  load,
  shape,
  seed = DEFAULT_SEED,
  budgetMs = 3000,
  minReps = 3,
  maxReps = 200,
  singleCallMs = SINGLE_CALL_MS,
  onPhase = () => {},
}) {
  const flops = flopsOf(shape);
  const totalRows = shape.B * shape.S;
  const perRowFlops = flops / totalRows;
  const result = { impl, shape: shape.name, flops, status: 'error', phase: 'inputs' };
  const phase = (p) => {
    result.phase = p;
    onPhase(p);
  };

  phase('inputs');
  let inputs;
  ({ shape, inputs } = shapeWithInputs(shape, seed));
  const { q, k, v } = inputs;

  // plain-js on big shapes: time an evenly spread subset of query rows and extrapolate.
  let timedRows = null;
  let factor = 1;
  if (impl === 'plain-js' && flops > PLAIN_FULL_FLOPS) {
    timedRows = sampleRows(shape, Math.max(8, Math.ceil(PLAIN_SUBSET_FLOPS / perRowFlops)));
    factor = totalRows / timedRows.length;
    result.extrapolated = { rows: timedRows.length, totalRows, factor };
  }

  phase('reference');
  let checkRows;
  if (timedRows) checkRows = timedRows;
  else if (flops <= FULL_CHECK_FLOPS) checkRows = sampleRows(shape, totalRows);
  else checkRows = sampleRows(shape, Math.min(128, Math.max(16, Math.floor(SAMPLED_CHECK_FLOPS / perRowFlops))));
  const tRef = now();
  const want = attentionRows(q, k, v, shape, checkRows, new Float64Array(checkRows.length * shape.D), true);
  result.referenceMs = now() - tRef;

  phase('load');
  const tLoad = now();
  // The inputs too, for implementations that stage them once at load (mha-wasm heap tensors).
  const instance = await load(shape, { ...(timedRows ? { rows: timedRows } : {}), inputs: { q, k, v } });
  result.loadMs = now() - tLoad;
  result.info = instance.info;

  phase('first-call');
  const tFirst = now();
  const out = await instance.run(q, k, v);
  result.firstCallMs = (now() - tFirst) * factor;

  phase('check');
  const check = compareRows(out, want, checkRows, shape.D);
  result.check = {
    ok: check.ok,
    rows: checkRows.length,
    totalRows,
    full: checkRows.length === totalRows && !timedRows,
    maxAbsErr: check.maxAbsErr,
    badCount: check.badCount,
    worst: check.worst,
    against: impl === 'plain-js' ? 'itself (plain JS is the reference)' : 'plain JS (float64 accumulation)',
  };
  if (!check.ok) {
    result.status = 'wrong';
    result.error =
      `wrong answer: ${check.badCount}/${check.checked} values off, max |err| ${check.maxAbsErr}` +
      (check.worst
        ? ` (row ${check.worst.row} col ${check.worst.col}: got ${check.worst.got}, want ${check.worst.want})`
        : '');
    await instance.dispose?.();
    return result;
  }

  const firstRaw = result.firstCallMs / factor;
  if (firstRaw > singleCallMs) {
    // A peer this slow (onnxruntime-web's GroupQueryAttention on gqa2k: about a minute a call) is timed by
    // its first call alone, so the whole run stays within minutes; the row says so (`singleCall`).
    result.singleCall = true;
    result.warmupCalls = 0;
    result.callsPerSample = 1;
    result.samplesMs = [result.firstCallMs];
    result.reps = 1;
    result.medianMs = result.minMs = result.p90Ms = result.firstCallMs;
    result.gflops = flops / (result.medianMs * 1e6);
    result.status = 'ok';
    phase('done');
    await instance.dispose?.();
    return result;
  }

  // Warm-up: lets V8 tier the code up: >= 2 calls and >= 300 ms; none when the first call took > 2 s.
  phase('warmup');
  let warm = 0;
  const tWarm = now();
  if (firstRaw < 2000) {
    while (warm < 2 || (now() - tWarm < Math.min(300, budgetMs / 4) && warm < 50)) {
      await instance.run(q, k, v);
      warm++;
    }
  }
  result.warmupCalls = warm;

  phase('timed');
  // Very fast calls are timed in batches of `batch` calls (each sample >= ~1 ms), so the timer's
  // resolution (5-100 us in browsers) does not dominate; a sample is then the batch mean.
  let batch = 1;
  if (warm > 0) {
    const tEst = now();
    await instance.run(q, k, v);
    const est = now() - tEst;
    batch = est < 1 ? Math.min(1000, Math.ceil(1 / Math.max(est, 0.001))) : 1;
  }
  const samples = [];
  // Slow rows: fewer repeats keep the whole run within minutes. Decided from the first timed
  // (warm) sample, not the first call, which is slower while V8 tiers up.
  let wantMin = minReps;
  const tStart = now();
  while (samples.length < maxReps && (samples.length < wantMin || now() - tStart < budgetMs)) {
    const t = now();
    for (let n = 0; n < batch; n++) await instance.run(q, k, v);
    const raw = (now() - t) / batch;
    samples.push(raw * factor);
    if (samples.length === 1) wantMin = raw > 20000 ? 1 : raw > 5000 ? Math.min(minReps, 2) : minReps;
  }
  result.callsPerSample = batch;
  result.samplesMs = samples;
  result.reps = samples.length;
  result.medianMs = median(samples);
  result.minMs = Math.min(...samples);
  result.p90Ms = quantile(samples, 0.9);
  result.gflops = flops / (result.medianMs * 1e6);
  result.status = 'ok';
  phase('done');
  await instance.dispose?.();
  return result;
}
