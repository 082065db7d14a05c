// Runs one interleaved job of bench/lib/jobs.mjs in this (child) process: sets up its contestants, checks
// each one's first output against plain JS (a contestant that fails its check or its setup is left out of
// the rounds, with the reason), times them in alternating rounds (bench/lib/interleave.mjs) and reports
// every contestant's per-round times and the job's per-round ratios. Node only.
import { makeInputs, shapeWithInputs } from '../../scripts/lib/prng.mjs';
import { attentionRows, sampleRows } from '../../scripts/lib/reference.mjs';
import { shapeByName, flopsOf } from './shapes.mjs';
import { interleave, roundRatio, spread } from './interleave.mjs';
import { jobByName, LOOP, MHA_F32, MHA_F16 } from './jobs.mjs';
import { IMPLS } from '../impls/index.mjs';
import { raggedContestants, saveLoadContestants } from './jobs-serving.mjs';
import { prefixContestants, reorderContestants } from './jobs-prefix.mjs';
import { ringContestants } from './jobs-ring.mjs';
import { samplesContestants } from './jobs-samples.mjs';
import { decodeContestants } from './jobs-decode.mjs';
import { checkSummary, distUrl, evictor, failure } from './jobs-common.mjs';
import { float16Bits, float16Value, roundToFloat16 } from '../../scripts/lib/float16.mjs';

const now = () => performance.now();
/** Stateless contestants check this many query rows (spread evenly, first and last included). */
const CHECK_ROWS = 16;

/**
 * Runs `job` by name. `onPhase` reports progress (the parent names the phase a timed-out child died in).
 * @returns the job's result: { job, kind, status, rounds, contestants: [...], ratios: [...], failed: [...] }
 */
export async function runJob({ job: name, seed, budgetMs = 3000, onPhase = () => {} }) {
  const job = jobByName(name);
  if (job.kind === 'context' || job.kind === 'bits') {
    // not timed: a search over the capacity (jobs-context.mjs), or a model's bits per byte (jobs-bits.mjs)
    const rows =
      job.kind === 'context'
        ? await (await import('./jobs-context.mjs')).contextRows({ onPhase })
        : await (await import('./jobs-bits.mjs')).bitsRows({ onPhase });
    return { job: name, kind: job.kind, group: job.group, status: 'ok', failed: [], ratios: [], contestants: [], rows };
  }
  const setups = {
    stateless: statelessContestants,
    decode: decodeContestants,
    loop: loopContestants,
    prefill: prefillContestants,
    ragged: (j, context) => raggedContestants(j, { ...context, evict: evictor() }),
    saveload: saveLoadContestants,
    prefix: (j, context) => prefixContestants(j, { ...context, evict: evictor() }),
    reorder: (j, context) => reorderContestants(j, { ...context, evict: evictor() }),
    ring: (j, context) => ringContestants(j, { ...context, evict: evictor() }),
    samples: samplesContestants,
  };
  const disposers = [];
  const failed = [];
  const ready = [];
  // Each setup yields { name, run, check?, info, ... } or { name, error }; a contestant is kept only when
  // its first output passes its check.
  for await (const c of setups[job.kind](job, { seed, onPhase, disposers })) {
    if (c.error) {
      failed.push({ name: c.name, error: c.error });
      continue;
    }
    onPhase(`check ${c.name}`);
    try {
      const t = now();
      await c.run();
      c.firstCallMs = now() - t;
      c.check = c.checkOutput();
    } catch (error) {
      failed.push(failure(c.name, error));
      continue;
    }
    if (!c.check.ok) {
      failed.push({
        name: c.name,
        error: `wrong answer: ${c.check.badCount} values off, max |err| ${c.check.maxAbsErr}`,
        check: c.check,
      });
      continue;
    }
    ready.push(c);
  }
  const result = { job: name, kind: job.kind, group: job.group, status: 'ok', failed, ratios: [] };
  if (ready.length === 0) {
    await Promise.all(disposers.map((d) => d()));
    return { ...result, status: 'error', error: failed.map((f) => `${f.name}: ${f.error}`).join('; ') };
  }
  const timed = await interleave(ready, { budgetMs, minRounds: job.minRounds, onPhase });
  result.rounds = timed.rounds;
  result.contestants = ready.map((c, i) => {
    const t = timed.contestants[i];
    const row = {
      name: c.name,
      info: c.info,
      check: c.check,
      firstCallMs: c.firstCallMs,
      callsPerSample: t.callsPerSample,
      roundMs: t.roundMs,
      medianMs: t.medianMs,
      minMs: t.minMs,
      maxMs: t.maxMs,
      ...c.row,
    };
    if (c.extra) Object.assign(row, c.extra());
    return row;
  });
  const have = new Set(ready.map((c) => c.name));
  for (const r of job.ratios) {
    if (!have.has(r.a) || !have.has(r.b)) continue;
    result.ratios.push({ ...r, ...roundRatio(timed, r.a, r.b, { speed: r.speed }) });
  }
  onPhase('dispose');
  await Promise.all(disposers.map((d) => d()));
  return result;
}

// ---- issue #13's pairs and bert-b8's threads: stateless calls through the bench's implementations

/**
 * A shape's inputs as the call takes them (docs/spec.md Part 4): a `rope` shape gets its tables from
 * mha-wasm's ropeTables; a float16 shape's q, k, v are binary16 bits (`args`), and the reference sees
 * their float32 values (`inputs`).
 */
async function statelessInputs(shapeName, seed) {
  let { shape, inputs } = shapeWithInputs(shapeByName(shapeName), seed);
  if (shape.rope) {
    const { ropeTables } = await import(distUrl);
    const { rotaryDim, theta } = shape.rope;
    shape = {
      ...shape,
      rope: { ...shape.rope, ...ropeTables({ rotaryDim, positions: Math.max(shape.S, shape.T), theta }) },
    };
  }
  if (shape.dtype !== 'float16') return { shape, inputs, args: inputs };
  const bits = (x) => Uint16Array.from(x, float16Bits);
  const args = { q: bits(inputs.q), k: bits(inputs.k), v: bits(inputs.v) };
  const widened = (x) => Float32Array.from(x, float16Value);
  return { shape, inputs: { q: widened(args.q), k: widened(args.k), v: widened(args.v) }, args };
}

async function* statelessContestants(job, { seed, onPhase, disposers }) {
  for (const { name, impl, shape: shapeName } of job.contestants) {
    onPhase(`setup ${name}`);
    const { shape, inputs, args } = await statelessInputs(shapeName, seed);
    const { q, k, v } = inputs;
    const rows = sampleRows(shape, CHECK_ROWS);
    const outD = shape.H * (shape.Dv ?? shape.D / shape.H); // H·Dv
    const want = attentionRows(q, k, v, shape, rows, new Float64Array(rows.length * outD), true);
    let instance;
    try {
      instance = await IMPLS[impl].load(shape, { inputs: args });
    } catch (error) {
      yield { name, error: String(error?.message ?? error) };
      continue;
    }
    disposers.push(() => instance.dispose?.());
    let out;
    yield {
      name,
      info: instance.info,
      row: { impl, shape: shapeName, flops: flopsOf(shape) },
      async run() {
        out = await instance.run(args.q, args.k, args.v);
      },
      checkOutput: () =>
        checkSummary(out instanceof Uint16Array ? Float32Array.from(out, float16Value) : out, want, rows, outD),
    };
  }
}

// ---- the generation loop: prefill, then one token per step, the cache growing

async function* loopContestants(job, { seed, onPhase, disposers }) {
  const { B, H, Hkv, Dh, prefill, steps } = LOOP;
  const total = prefill + steps;
  const D = H * Dh;
  const kvD = Hkv * Dh;
  const shape = { B, S: total, T: total, D, H, Hkv, causal: true };
  onPhase('inputs');
  const { q, k, v } = makeInputs(shape, seed);
  const lastRow = Int32Array.of(total - 1);
  const wantOf = (kk, vv) => attentionRows(q, kk, vv, shape, lastRow, new Float64Array(D), true);
  const want = { float32: wantOf(k, v), float16: wantOf(k.map(roundToFloat16), v.map(roundToFloat16)) };
  const token = (x, width, t) => x.subarray(t * width, (t + 1) * width);
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  for (const [name, dtype] of [
    [MHA_F32, 'float32'],
    [MHA_F16, 'float16'],
  ]) {
    onPhase(`setup ${name}`);
    const cache = mha.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity: total, dtype });
    const out = new Float32Array(D);
    const prefillMs = [];
    const [qP, kP, vP] = [q.subarray(0, prefill * D), k.subarray(0, prefill * kvD), v.subarray(0, prefill * kvD)];
    yield {
      name,
      info: { build: mha.info.build, threads: 1, dtype, prefill, steps },
      row: { dtype, threads: 1, prefill, steps },
      // One call = truncate(0), the prefill, then `steps` single-token steps; its time is the steps'.
      run() {
        cache.truncate(0);
        const t0 = now();
        cache.attend(qP, kP, vP, { numHeads: H });
        const t1 = now();
        for (let t = prefill; t < total; t++)
          cache.attend(token(q, D, t), token(k, kvD, t), token(v, kvD, t), { numHeads: H, out });
        prefillMs.push(t1 - t0);
        return now() - t1;
      },
      // The last step's row against the last row of one causal call over the whole sequence.
      checkOutput: () => checkSummary(out, want[dtype], Int32Array.of(0), D),
      extra: () => ({ prefillMs: spread(prefillMs) }),
    };
  }
}

// ---- prefill through the cache against the stateless causal call (gqa2k's dims)

async function* prefillContestants(job, { seed, onPhase, disposers }) {
  const shape = shapeByName(job.shape);
  const { B, S, T, D, H, Hkv } = shape;
  const Dh = D / H;
  onPhase('inputs');
  const { q, k, v } = makeInputs(shape, seed);
  const rows = sampleRows(shape, CHECK_ROWS);
  const want = attentionRows(q, k, v, shape, rows, new Float64Array(rows.length * D), true);
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  const row = { shape: job.shape, flops: flopsOf(shape) };
  const cache = mha.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity: T });
  const cacheOut = new Float32Array(B * S * D);
  onPhase('setup');
  yield {
    name: 'cache prefill',
    info: { build: mha.info.build, threads: 1, call: 'createKVCache + attend (S tokens), then truncate(0)' },
    row,
    run() {
      cache.truncate(0);
      cache.attend(q, k, v, { numHeads: H, out: cacheOut });
    },
    checkOutput: () => checkSummary(cacheOut, want, rows, D),
  };
  const statelessOut = new Float32Array(B * S * D);
  const options = {
    batch: B,
    seqLen: S,
    kvSeqLen: T,
    dModel: D,
    numHeads: H,
    numKvHeads: Hkv,
    causal: true,
    out: statelessOut,
  };
  yield {
    name: 'stateless causal',
    info: { build: mha.info.build, threads: 1, call: 'multiHeadAttention(causal: true, numKvHeads)' },
    row,
    run() {
      mha.multiHeadAttention(q, k, v, options);
    },
    checkOutput: () => checkSummary(statelessOut, want, rows, D),
  };
}
