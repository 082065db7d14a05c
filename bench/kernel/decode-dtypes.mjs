// Decode steps per cache dtype, one thread, through the public API of a built dist/ (Node, V8): the
// kernel's loaders compared on the issue-#32 shapes, with and without subnormal halves in the data. Not a
// test. Per round, interleaved: every row (shape x dtype x data) runs `steps` steps, each after an
// untimed streaming read that evicts the last-level cache (as bench/lib/jobs-run.mjs does), and keeps its
// median; reported: the median and range of those over rounds, and each dtype's speed against float32 of
// the same shape and data (ratio of the medians).
//
//   node bench/kernel/decode-dtypes.mjs [--shapes decode-mha-8k,decode-gqa-4k] [--dtypes float32,float16]
//     [--data normal,subnormal] [--rounds 7] [--steps 5] [--dist dir ...] [--relaxed] [--warm] [--json]
//
// --warm: every row also runs without the eviction (its K and V then come from the last-level cache when
// they fit): the step's time when memory costs nothing, its compute ceiling, in the same run.
// A dtype written 'int8:integer' or 'int4:integer' asks for integer arithmetic (docs/spec.md 5.1).
// --data subnormal: 10 % of k and v elements replaced by values whose halves are subnormal (|x| < 2^-14),
// drawn uniformly in magnitude over [2^-24, 2^-14), random sign. Several --dist (built dist/ folders, e.g.
// a copy of another commit's) run side by side as extra rows (A/B of kernels on the same data).
import { lastLevelCacheBytes, loadAverage } from '../lib/env.mjs';
import { touchedMemory, bandwidthReader } from '../lib/bandwidth.mjs';
import { evictionBytes } from '../lib/jobs.mjs';
import { mulberry32, fillNormal } from '../../scripts/lib/prng.mjs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const SHAPES = {
  'decode-mha-8k': { B: 1, T: 8192, H: 16, Hkv: 16, Dh: 64 },
  'decode-gqa-4k': { B: 1, T: 4096, H: 32, Hkv: 8, Dh: 128 },
  'decode-mqa-8k': { B: 1, T: 8192, H: 16, Hkv: 1, Dh: 128 },
  'decode-b4': { B: 4, T: 1024, H: 16, Hkv: 4, Dh: 64 },
};

function parseArgs(argv) {
  const a = {
    shapes: ['decode-mha-8k', 'decode-gqa-4k'],
    dtypes: ['float32', 'float16'],
    data: ['normal'],
    rounds: 7,
    steps: 5,
    dist: [],
    relaxed: false,
    warm: false,
    json: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = () => argv[++i];
    if (k === '--shapes') a.shapes = next().split(',');
    else if (k === '--dtypes') a.dtypes = next().split(',');
    else if (k === '--data') a.data = next().split(',');
    else if (k === '--rounds') a.rounds = Number(next());
    else if (k === '--steps') a.steps = Number(next());
    else if (k === '--dist') a.dist.push(next());
    else if (k === '--relaxed') a.relaxed = true;
    else if (k === '--warm') a.warm = true;
    else if (k === '--json') a.json = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (a.dist.length === 0) a.dist.push(new URL('../../dist', import.meta.url).pathname);
  return a;
}

function makeData(s, kind, seed) {
  const rand = mulberry32(seed);
  const n = s.B * s.T * s.Hkv * s.Dh;
  const k = fillNormal(new Float32Array(n), rand),
    v = fillNormal(new Float32Array(n), rand);
  const q = fillNormal(new Float32Array(s.B * s.H * s.Dh), rand);
  if (kind === 'subnormal') {
    for (const x of [k, v]) {
      for (let i = 0; i < n; i++) {
        if (rand() < 0.1) x[i] = (rand() < 0.5 ? -1 : 1) * 2 ** (-24 + 10 * rand());
      }
    }
  } else if (kind !== 'normal') {
    throw new Error(`unknown data ${kind}`);
  }
  return { k, v, q };
}

// A fixed-length step: a cache of capacity T filled to T - 1, then attend one token and truncate back.
// dtypeSpec: a cache dtype, or 'int8:integer' / 'int4:integer' for integer arithmetic (docs/spec.md 5.1).
function cacheStep(mha, s, d, dtypeSpec) {
  const { B, T, H, Hkv, Dh } = s;
  const kvD = Hkv * Dh;
  const [dtype, arithmetic] = dtypeSpec.split(':');
  const cache = mha.createKVCache({
    batch: B,
    numKvHeads: Hkv,
    headDim: Dh,
    capacity: T,
    dtype,
    ...(arithmetic ? { arithmetic } : {}),
  });
  const rows = (x, from, count) => {
    const out = new Float32Array(B * count * kvD);
    for (let b = 0; b < B; b++)
      out.set(x.subarray((b * T + from) * kvD, (b * T + from + count) * kvD), b * count * kvD);
    return out;
  };
  const kFill = rows(d.k, 0, T - 1),
    vFill = rows(d.v, 0, T - 1);
  cache.attend(kFill, kFill, vFill, { numHeads: Hkv, window: [0, 0] });
  const kNew = rows(d.k, T - 1, 1),
    vNew = rows(d.v, T - 1, 1);
  const out = new Float32Array(B * H * Dh);
  const options = { numHeads: H, out };
  return () => {
    cache.attend(d.q, kNew, vNew, options);
    cache.truncate(T - 1);
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { memory, pages } = touchedMemory(evictionBytes(lastLevelCacheBytes()));
  const read = bandwidthReader(memory, pages);
  const sink = new Int32Array(1);
  const evict = () => {
    sink[0] += read(0, pages * 65536);
  };
  const builds = [];
  for (const dir of args.dist) {
    const { createMHA } = await import(pathToFileURL(path.resolve(dir, 'index.js')).href);
    const mha = await createMHA({ threads: 1, simd: args.relaxed ? 'auto' : 'fixed' });
    builds.push({ dir, mha });
  }
  const rows = [];
  for (const shape of args.shapes) {
    const s = SHAPES[shape];
    if (!s) throw new Error(`unknown shape ${shape}`);
    for (const kind of args.data) {
      const d = makeData(s, kind, 1234);
      for (const [bi, b] of builds.entries()) {
        for (const dtype of args.dtypes) {
          for (const warm of args.warm ? [false, true] : [false]) {
            rows.push({ shape, kind, dtype, warm, build: bi, step: cacheStep(b.mha, s, d, dtype), ms: [] });
          }
        }
      }
    }
  }
  for (const r of rows) {
    evict();
    r.step();
  } // warm-up: tier-up and first-touch
  for (let round = 0; round < args.rounds; round++) {
    const order = round % 2 === 0 ? rows : [...rows].reverse();
    for (const r of order) {
      const times = [];
      for (let i = 0; i < args.steps; i++) {
        if (!r.warm) evict();
        const t0 = performance.now();
        r.step();
        times.push(performance.now() - t0);
      }
      r.ms.push(median(times));
    }
  }
  const load = loadAverage();
  const f32 = (r, warm) =>
    rows.find(
      (x) =>
        x.shape === r.shape && x.kind === r.kind && x.build === r.build && x.dtype === 'float32' && x.warm === warm,
    );
  const out = rows.map((r) => {
    const base = f32(r, r.warm),
      evicted = f32(r, false);
    const m = median(r.ms);
    return {
      shape: r.shape,
      data: r.kind,
      dtype: r.dtype,
      cache: r.warm ? 'warm' : 'evicted',
      build: builds[r.build].mha.info.build,
      dist: builds[r.build].dir,
      median: +m.toFixed(3),
      min: +Math.min(...r.ms).toFixed(3),
      max: +Math.max(...r.ms).toFixed(3),
      vsF32: base ? +(median(base.ms) / m).toFixed(3) : null,
      // A warm row's speed over the evicted float32 step: the most an evicted step of this dtype can reach.
      ceilingVsF32: r.warm && evicted ? +(median(evicted.ms) / m).toFixed(3) : null,
    };
  });
  if (args.json) {
    console.log(JSON.stringify({ load, rows: out }, null, 1));
    return;
  }
  console.log(
    `load ${load.join(' ')}; ${args.rounds} rounds x ${args.steps} steps; median [min - max] ms of the rounds' medians`,
  );
  for (const o of out) {
    console.log(
      `${o.shape.padEnd(14)} ${o.data.padEnd(9)} ${o.dtype.padEnd(12)} ${o.cache.padEnd(7)} ` +
        `b${args.dist.indexOf(o.dist)} ${o.build.padEnd(12)} ` +
        `${o.median.toFixed(3)} [${o.min.toFixed(3)} - ${o.max.toFixed(3)}]  x${o.vsF32 ?? '-'} vs f32` +
        (o.ceilingVsF32 ? ` (x${o.ceilingVsF32} vs evicted f32)` : ''),
    );
  }
}

await main();
