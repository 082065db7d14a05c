// Runs one interleaved job of bench/lib/jobs.mjs in this (child) process: sets up its contestants, checks
// each one's first output against plain JS (a contestant that fails its check or its setup is left out of
// the rounds, with the reason), times them in alternating rounds (bench/lib/interleave.mjs) and reports
// every contestant's per-round times and the job's per-round ratios. Node only.
import { readFileSync } from 'node:fs';
import { makeInputs, shapeWithInputs } from '../../scripts/lib/prng.mjs';
import { attentionRows, sampleRows, compareRows } from '../../scripts/lib/reference.mjs';
import { shapeByName, flopsOf } from './shapes.mjs';
import { interleave, roundRatio, spread } from './interleave.mjs';
import { touchedMemory, bandwidthReader } from './bandwidth.mjs';
import { lastLevelCacheBytes } from './env.mjs';
import {
  jobByName,
  decodeShapeByName,
  decodeBytes,
  decodeFlops,
  evictionBytes,
  LOOP,
  MHA_F32,
  MHA_F16,
  MHA_F32_2T,
  MHA_F16_2T,
  MHA_F32_T1,
  MHA_F32_ROPE,
  MHA_BF16,
  MHA_INT8,
  MHA_INT8_INTEGER,
  MHA_INT4,
  MHA_INT4_INTEGER,
  MHA_F16_SUBNORMAL,
  ORT_GQA,
  PLAIN_JS,
} from './jobs.mjs';
import { roundAsStored } from '../../scripts/lib/cache-rounding.mjs';
import { IMPLS } from '../impls/index.mjs';
import { raggedContestants, saveLoadContestants } from './jobs-serving.mjs';
import { prefixContestants, reorderContestants } from './jobs-prefix.mjs';
import { ringContestants } from './jobs-ring.mjs';
import { samplesContestants } from './jobs-samples.mjs';
import { float16Bits, float16Value, roundToFloat16 } from '../../scripts/lib/float16.mjs';
import { sliceRows } from '../../scripts/lib/golden-runner.mjs';

const distUrl = new URL('../../dist/index.js', import.meta.url).href;
const now = () => performance.now();
const range = (n) => Int32Array.from({ length: n }, (_, i) => i);
/** Stateless contestants check this many query rows (spread evenly, first and last included). */
const CHECK_ROWS = 16;

function checkSummary(got, want, rows, D) {
  const c = compareRows(got, want, rows, D);
  return { ok: c.ok, rows: rows.length, maxAbsErr: c.maxAbsErr, badCount: c.badCount, worst: c.worst };
}

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
      failed.push({
        name: c.name,
        error: String(error?.stack ?? error)
          .split('\n')
          .slice(0, 3)
          .join(' | '),
      });
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

// ---- issue #14: decode steps

/** An untimed streaming read over evictionBytes() of this machine's last-level cache, run before every timed step so each step reads its K/V from DRAM. */
function evictor() {
  const { memory, pages } = touchedMemory(evictionBytes(lastLevelCacheBytes()));
  const read = bandwidthReader(memory, pages);
  const end = pages * 65536;
  const sink = new Int32Array(1);
  return () => {
    sink[0] += read(0, end);
  };
}

/**
 * The step's inputs: q (B,1,H·Dh), the cache's T keys/values (B,T,Hkv·Dh) split into the T-1 filled ones
 * and the new one; `rope` (the tables of T positions, or undefined) adds the rotated step's answer.
 */
function decodeInputs(s, seed, rope, dtypes) {
  const { B, T, H, Hkv, Dh } = s;
  const kvD = Hkv * Dh;
  const ref = { B, S: 1, T, D: H * Dh, H, Hkv, causal: true, queryOffset: T - 1 };
  const { q, k, v } = makeInputs(ref, seed);
  const rows = range(B);
  const wantOf = (kk, vv) => attentionRows(q, kk, vv, ref, rows, new Float64Array(B * ref.D), true);
  const want = {};
  for (const dtype of dtypes) want[dtype] = wantOf(roundAsStored(k, dtype, Hkv, Dh), roundAsStored(v, dtype, Hkv, Dh));
  if (rope) want.rope = attentionRows(q, k, v, { ...ref, rope }, rows, new Float64Array(B * ref.D), true);
  return {
    ref,
    q,
    k,
    v,
    rows,
    want,
    kFill: sliceRows(k, B, T, kvD, 0, T - 1),
    vFill: sliceRows(v, B, T, kvD, 0, T - 1),
    kNew: sliceRows(k, B, T, kvD, T - 1, 1),
    vNew: sliceRows(v, B, T, kvD, T - 1, 1),
  };
}

/**
 * The step's inputs with every tenth k and v value (chosen by a fixed stride pattern, 10%) replaced by a
 * float16 subnormal (|x| < 2^-14, nonzero mantissa): the float16 widening's denormal case.
 */
function subnormalInputs(s, inputs) {
  const { B, T, Hkv, Dh } = s;
  const kvD = Hkv * Dh;
  const sub = (x) =>
    x.map((value, i) =>
      (i * 7919) % 10 === 0 ? Math.fround((((i * 40503) % 1023) + 1) * 2 ** -24 * (value < 0 ? -1 : 1)) : value,
    );
  const k = sub(inputs.k),
    v = sub(inputs.v);
  const want = attentionRows(
    inputs.q,
    roundAsStored(k, 'float16', Hkv, Dh),
    roundAsStored(v, 'float16', Hkv, Dh),
    inputs.ref,
    inputs.rows,
    new Float64Array(B * inputs.ref.D),
    true,
  );
  return {
    ...inputs,
    k,
    v,
    want: { float16: want },
    kFill: sliceRows(k, B, T, kvD, 0, T - 1),
    vFill: sliceRows(v, B, T, kvD, 0, T - 1),
    kNew: sliceRows(k, B, T, kvD, T - 1, 1),
    vNew: sliceRows(v, B, T, kvD, T - 1, 1),
  };
}

/** (B,T,Hkv·Dh) rows [0, T-1) as ORT's past layout (B,Hkv,T-1,Dh). */
function toPastLayout(x, { B, T, Hkv, Dh }) {
  const P = T - 1;
  const out = new Float32Array(B * Hkv * P * Dh);
  for (let b = 0; b < B; b++) {
    for (let g = 0; g < Hkv; g++) {
      for (let t = 0; t < P; t++) {
        const from = ((b * T + t) * Hkv + g) * Dh;
        out.set(x.subarray(from, from + Dh), ((b * Hkv + g) * P + t) * Dh);
      }
    }
  }
  return out;
}

/**
 * A fixed-length step through the public API: a cache of capacity T filled once to T - 1, then each call
 * appends the new token (attend) and truncates back to T - 1, so every step attends over T keys.
 */
function cacheStep(mha, s, inputs, dtype, rope, arithmetic) {
  const { B, T, H, Hkv, Dh } = s;
  const cache = mha.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity: T, dtype, arithmetic });
  // The fill's queries see only their own key (window [0, 0]): O(T) work instead of a causal prefill.
  // With rope the fill rotates (and stores) its keys at their positions, as a prefill would.
  cache.attend(inputs.kFill, inputs.kFill, inputs.vFill, { numHeads: Hkv, window: [0, 0], ...(rope ? { rope } : {}) });
  if (cache.length !== T - 1) throw new Error(`filled cache has length ${cache.length}, expected ${T - 1}`);
  const out = new Float32Array(B * H * Dh);
  const options = { numHeads: H, out, ...(rope ? { rope } : {}) };
  return {
    out,
    run() {
      cache.attend(inputs.q, inputs.kNew, inputs.vNew, options);
      cache.truncate(T - 1);
    },
  };
}

async function* decodeContestants(job, { seed, onPhase, disposers }) {
  const s = decodeShapeByName(job.shape);
  onPhase('inputs');
  const { createMHA, ropeTables } = await import(distUrl);
  const rope = job.contestants.includes(MHA_F32_ROPE)
    ? { ...ropeTables({ rotaryDim: s.Dh, positions: s.T }), rotaryDim: s.Dh }
    : undefined;
  const dtypes = [
    'float32',
    'float16',
    ...(job.contestants.includes(MHA_BF16) ? ['bfloat16'] : []),
    ...(job.contestants.includes(MHA_INT8) ? ['int8'] : []),
    ...(job.contestants.includes(MHA_INT4) ? ['int4'] : []),
  ];
  const inputs = decodeInputs(s, seed, rope, dtypes);
  const subnormal = job.contestants.includes(MHA_F16_SUBNORMAL) ? subnormalInputs(s, inputs) : undefined;
  const evict = evictor();
  const D = s.H * s.Dh;
  const instances = new Map();
  // threadsBuild: the threaded module with one thread, given as wasmBinary (createMHA's own pick for one
  // thread is the single-threaded build).
  const mhaOf = async (threads, threadsBuild) => {
    const key = `${threads}${threadsBuild ? ' threads build' : ''}`;
    if (!instances.has(key)) {
      const wasmBinary = threadsBuild
        ? readFileSync(new URL('../../dist/mha-threads.wasm', import.meta.url))
        : undefined;
      const mha = await createMHA({ threads, ...(wasmBinary ? { wasmBinary } : {}) });
      if (mha.info.threads !== threads)
        throw new Error(`asked for ${threads} threads, got ${mha.info.threads} (${mha.info.build})`);
      disposers.push(() => mha.dispose());
      instances.set(key, mha);
    }
    return instances.get(key);
  };
  const rowOf = (dtype, threads) => ({ dtype, threads, bytes: decodeBytes(s, dtype), flops: decodeFlops(s) });
  const mhaRows = {
    [MHA_F32]: ['float32', 1],
    [MHA_F16]: ['float16', 1],
    [MHA_F32_2T]: ['float32', 2],
    [MHA_F16_2T]: ['float16', 2],
    [MHA_F32_T1]: ['float32', 1, true],
    [MHA_F32_ROPE]: ['float32', 1, false, true],
    [MHA_BF16]: ['bfloat16', 1],
    [MHA_INT8]: ['int8', 1],
    [MHA_INT8_INTEGER]: ['int8', 1, false, false, false, 'integer'],
    [MHA_INT4]: ['int4', 1],
    [MHA_INT4_INTEGER]: ['int4', 1, false, false, false, 'integer'],
    [MHA_F16_SUBNORMAL]: ['float16', 1, false, false, true],
  };
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    try {
      if (mhaRows[name]) {
        const [dtype, threads, threadsBuild, withRope, withSubnormals, arithmetic] = mhaRows[name];
        const mha = await mhaOf(threads, threadsBuild);
        const data = withSubnormals ? subnormal : inputs;
        const step = cacheStep(mha, s, data, dtype, withRope ? rope : undefined, arithmetic);
        yield {
          name,
          info: {
            build: mha.info.build,
            threads,
            dtype,
            ...(arithmetic ? { arithmetic } : {}),
            ...(withRope ? { rope: `rotaryDim ${s.Dh}` } : {}),
            ...(withSubnormals ? { data: '10% of k and v float16 subnormals' } : {}),
          },
          row: rowOf(dtype, threads),
          before: evict,
          run: step.run,
          checkOutput: () => checkSummary(step.out, data.want[withRope ? 'rope' : dtype], inputs.rows, D),
        };
      } else if (name === ORT_GQA) {
        const { createGqaStep } = await import('../impls/ort.mjs');
        const peer = await createGqaStep(s, {
          pastKey: toPastLayout(inputs.k, s),
          pastValue: toPastLayout(inputs.v, s),
        });
        disposers.push(() => peer.dispose());
        let out;
        yield {
          name,
          info: peer.info,
          row: rowOf('float32', 1),
          before: evict,
          async run() {
            out = await peer.run(inputs.q, inputs.kNew, inputs.vNew);
          },
          checkOutput: () => checkSummary(out, inputs.want.float32, inputs.rows, D),
        };
      } else if (name === PLAIN_JS) {
        yield { name, row: rowOf('float32', 1), before: evict, ...plainJsStep(s, inputs) };
      } else {
        throw new Error(`no such decode contestant "${name}"`);
      }
    } catch (error) {
      yield {
        name,
        error: String(error?.stack ?? error)
          .split('\n')
          .slice(0, 3)
          .join(' | '),
      };
    }
  }
}

/** Plain JS over an f32 cache (B,T,Hkv·Dh): the append writes the new token at T - 1, then the reference attends. */
function plainJsStep(s, inputs) {
  const { B, T, Hkv, Dh } = s;
  const kvD = Hkv * Dh;
  const kCache = inputs.k.slice();
  const vCache = inputs.v.slice();
  const out = new Float32Array(B * s.H * Dh);
  return {
    info: { accumulate: 'float64', reference: 'scripts/lib/reference.mjs' },
    run() {
      for (let b = 0; b < B; b++) {
        kCache.set(inputs.kNew.subarray(b * kvD, (b + 1) * kvD), (b * T + T - 1) * kvD);
        vCache.set(inputs.vNew.subarray(b * kvD, (b + 1) * kvD), (b * T + T - 1) * kvD);
      }
      attentionRows(inputs.q, kCache, vCache, inputs.ref, inputs.rows, out, false);
    },
    checkOutput: () => checkSummary(out, inputs.want.float32, inputs.rows, s.H * Dh),
  };
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
