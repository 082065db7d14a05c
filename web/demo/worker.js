// The demo's background worker: the live sanity checks and the timing runs, off the main thread.
// The page starts a fresh worker per job (and terminates a busy one when settings change), so the
// "first call" time is a real first call of a fresh instance.
//
// in:  { q, k, v, opts: {batch, seqLen, dModel, numHeads, mask?, causal?} }
// out: { type: 'first', ms } -> { type: 'checks', ... } -> { type: 'progress', ... }* -> { type: 'timing', ... }
//      or { type: 'error', message }
import { createMHA } from '/dist/index.js';
import { bitIdentical, headSlice, maxAbsDiff, plainMultiHeadAttention, setHeadSlice } from './model.js';

const now = () => performance.now();

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function checks(mha, q, k, v, opts) {
  const { batch: B, seqLen: S, dModel: D, numHeads: H } = opts;
  const full = mha.multiHeadAttention(q, k, v, opts);

  // Each head alone: its dense (B, S, Dh) slice through numHeads = 1, merged back by columns.
  const merged = new Float32Array(full.length);
  for (let h = 0; h < H; h++) {
    const one = mha.multiHeadAttention(
      headSlice(q, B, S, D, H, h),
      headSlice(k, B, S, D, H, h),
      headSlice(v, B, S, D, H, h),
      {
        ...opts,
        dModel: D / H,
        numHeads: 1,
      },
    );
    setHeadSlice(merged, one, B, S, D, H, h);
  }

  // One head over all of D, against the float64 plain-JS reference.
  const single = mha.multiHeadAttention(q, k, v, { ...opts, numHeads: 1 });
  const reference = plainMultiHeadAttention(q, k, v, { ...opts, numHeads: 1 });

  const shape = { batch: B, seqLen: S, dModel: D, numHeads: H };
  const roundTrip = mha.mergeHeads(mha.splitHeads(q, shape), shape);

  let nanRows = 0;
  for (let r = 0; r < B * S; r++) if (Number.isNaN(full[r * D])) nanRows++;

  return {
    exactDiff: maxAbsDiff(full, merged),
    exactBits: bitIdentical(full, merged),
    refDiff: maxAbsDiff(single, reference),
    splitOk: bitIdentical(roundTrip, q),
    nanRows,
  };
}

/** Median ms per call of fn, after warm-up; calls are batched so one sample lasts a few ms. */
function measure(fn, phase, report) {
  const warmStart = now();
  let calls = 0;
  while (calls < 2 || (now() - warmStart < 300 && calls < 200)) {
    fn();
    calls++;
  }
  const perCall = Math.max((now() - warmStart) / calls, 1e-4);
  const reps = Math.max(1, Math.ceil(4 / perCall));
  const budget = 2500; // ms for the samples of one implementation
  const samples = Math.max(3, Math.min(9, Math.floor(budget / (perCall * reps))));
  const times = [];
  for (let s = 0; s < samples; s++) {
    const t0 = now();
    for (let r = 0; r < reps; r++) fn();
    times.push((now() - t0) / reps);
    report({ phase, done: s + 1, total: samples });
  }
  return { median: median(times), samples, reps, warmupCalls: calls };
}

self.onmessage = async (event) => {
  const { q, k, v, opts } = event.data;
  try {
    const mha = await createMHA();
    const out = new Float32Array(q.length);

    const t0 = now();
    mha.multiHeadAttention(q, k, v, { ...opts, out });
    self.postMessage({ type: 'first', ms: now() - t0, info: { ...mha.info } });

    self.postMessage({ type: 'checks', ...checks(mha, q, k, v, opts) });

    let sink = 0; // keeps results observable
    const post = (p) => self.postMessage({ type: 'progress', ...p });
    const wasm = measure(
      () => {
        mha.multiHeadAttention(q, k, v, { ...opts, out });
        sink += out[0];
      },
      'wasm',
      post,
    );
    const js = measure(
      () => {
        sink += plainMultiHeadAttention(q, k, v, opts)[0];
      },
      'js',
      post,
    );
    self.postMessage({ type: 'timing', wasm, js, sink: Number.isFinite(sink) || Number.isNaN(sink) });
  } catch (error) {
    self.postMessage({ type: 'error', message: String(error?.message ?? error) });
  }
};
