#!/usr/bin/env node
// Relaxed SIMD against SIMD128 in one Chromium page (or --engine firefox), interleaved: `node bench/browser/relaxed-ab.mjs
// [--shapes bert,long2k] [--rounds 6] [--ort] [--heap] [--out]`. Per round and shape, each build (createMHA() =
// relaxed-simd, createMHA({ simd: 'fixed' }) = simd, and with --ort onnxruntime-web's standard-op graph on
// 1 thread; with --heap each build again on heap tensors, which copies nothing in or out: the part of the
// call that the build changes; with --out each build again in copy mode into a result array kept across
// calls, as a model loop passes `out`: a new result array is fresh memory, whose page faults took 0.3 ms
// of a 2.75 ms bert call in Chromium 156 here) runs back to back, the order alternating between rounds,
// so a slow spell of this shared machine falls on all of them; medians are over all calls of all rounds.
// The bench proper (`npm run bench -- --browser`) measures each row on its own, which on a busy machine can
// put the two builds minutes apart. Prints one JSON object (the page's results) and a summary: the ratio of
// the medians, and of the 10th percentiles over all calls, which on a loaded machine (load average far above
// the 2 cores) moves much less than the medians: most calls are then slowed by other processes, unevenly;
// and the median and quartiles over the rounds of each round's ratio (of the two rows' medians in it).
// With --decode, the shapes are decode shapes (bench/lib/jobs.mjs, e.g. decode-gqa-4k) and each row is one
// decode step through a float32 cache of each build (cache.attend of one token, then truncate), the
// last-level cache evicted by a 64 MiB read before every step as in the Node decode jobs. `--dtype int8:integer`
// (any cache dtype, `:integer` for integer arithmetic) makes the caches of that dtype instead of float32.
// With --heap it also measures the two ceilings of bench/lib/ceiling.mjs (mul+add and relaxed_madd) in the
// page, once per round, so that the builds' ratio can be read against the CPU's own FMA speed-up.
import { option, withBenchPage } from './bench-page.mjs';
import { shapeByName } from '../lib/shapes.mjs';

const args = process.argv.slice(2);
const shapes = option(args, '--shapes', 'bert,long2k').split(',');
const rounds = Number(option(args, '--rounds', '6'));
const withOrt = args.includes('--ort');
const withHeap = args.includes('--heap');
const withOut = args.includes('--out');
const withDecode = args.includes('--decode');
const [cacheDtype, arithmetic] = option(args, '--dtype', 'float32').split(':');

const engine = option(args, '--engine', 'chromium');
await withBenchPage(
  async (page, browserName) => {
    const models = {};
    if (withOrt) {
      const { standardOpsModel } = await import('../lib/onnx-models.mjs');
      for (const name of shapes) models[name] = Array.from(standardOpsModel(shapeByName(name), false));
    }
    const result = await page.evaluate(
      async ({ shapes, rounds, models, withHeap, withOut, withDecode, cacheDtype, arithmetic }) => {
        const { createMHA } = await import('/dist/index.js');
        const { shapeByName, flopsOf } = await import('/bench/lib/shapes.mjs');
        const { makeInputs } = await import('/scripts/lib/prng.mjs');
        const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
        const p10 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 10)];
        const impls = { relaxed: await createMHA(), fixed: await createMHA({ simd: 'fixed' }) };
        const builds = { relaxed: impls.relaxed.info.build, fixed: impls.fixed.info.build };
        const out = { builds, shapes: {} };
        const ceilingRuns = { 'mul+add': [], relaxed_madd: [] };
        const ceiling = withHeap ? await import('/bench/lib/ceiling.mjs') : undefined;
        const { DECODE_SHAPES, decodeFlops } = await import('/bench/lib/jobs.mjs');
        const evictBuffer = new Float32Array(16 * 2 ** 20); // 64 MiB
        const evict = () => {
          let x = 0;
          for (let i = 0; i < evictBuffer.length; i += 16) x += evictBuffer[i];
          return x;
        };
        for (const name of shapes) {
          const decodeShape = withDecode ? DECODE_SHAPES.find((d) => d.name === name) : undefined;
          if (withDecode && !decodeShape) throw new Error(`no decode shape ${name}`);
          const shape = decodeShape
            ? {
                B: decodeShape.B,
                S: 1,
                T: decodeShape.T,
                D: decodeShape.H * decodeShape.Dh,
                H: decodeShape.H,
                Hkv: decodeShape.Hkv,
              }
            : shapeByName(name);
          const { q, k, v } = makeInputs(shape);
          const options = {
            batch: shape.B,
            seqLen: shape.S,
            kvSeqLen: shape.T,
            dModel: shape.D,
            numHeads: shape.H,
            causal: !!shape.causal,
          };
          const runners = {
            relaxed: async () => impls.relaxed.multiHeadAttention(q, k, v, options),
            fixed: async () => impls.fixed.multiHeadAttention(q, k, v, options),
          };
          if (decodeShape) {
            const { B, T, Hkv, Dh } = decodeShape;
            const kvD = Hkv * Dh;
            const rows = (x, from, count) => {
              const out = new Float32Array(B * count * kvD);
              for (let b = 0; b < B; b++)
                out.set(x.subarray((b * T + from) * kvD, (b * T + from + count) * kvD), b * count * kvD);
              return out;
            };
            const kFill = rows(k, 0, T - 1),
              vFill = rows(v, 0, T - 1),
              kNew = rows(k, T - 1, 1),
              vNew = rows(v, T - 1, 1);
            const q1 = q.subarray(0, B * shape.D);
            for (const build of ['relaxed', 'fixed']) {
              const cache = impls[build].createKVCache({
                batch: B,
                numKvHeads: Hkv,
                headDim: Dh,
                capacity: T,
                dtype: cacheDtype,
                ...(arithmetic ? { arithmetic } : {}),
              });
              cache.attend(kFill, kFill, vFill, { numHeads: Hkv, window: [0, 0] });
              const stepOut = new Float32Array(B * shape.D);
              runners[build] = async () => {
                evict();
                const t = performance.now();
                cache.attend(q1, kNew, vNew, { numHeads: shape.H, out: stepOut });
                cache.truncate(T - 1);
                return performance.now() - t; // the step alone, without the eviction
              };
            }
          }
          if (withOut) {
            // Copy mode into a kept result array, as a model loop does: no fresh pages to fault in per call.
            const kept = { relaxed: new Float32Array(q.length), fixed: new Float32Array(q.length) };
            for (const build of ['relaxed', 'fixed']) {
              runners[`${build} out`] = async () =>
                impls[build].multiHeadAttention(q, k, v, { ...options, out: kept[build] });
            }
          }
          if (withHeap) {
            // The bench's own heap-tensor row (bench/impls/mha-wasm.mjs), an instance of each build.
            const { create } = await import('/bench/impls/mha-wasm.mjs');
            for (const build of ['relaxed', 'fixed']) {
              const heap = await create(shape, {
                heapTensors: true,
                inputs: { q, k, v },
                simd: build === 'fixed' ? 'fixed' : undefined,
              });
              runners[`${build} heap`] = async () => heap.run(q, k, v);
            }
          }
          if (models[name]) {
            const { createStd } = await import('/bench/impls/ort.mjs');
            const ort = await createStd(shape, { model: models[name] });
            runners.ort = () => ort.run(q, k, v);
          }
          const names = Object.keys(runners);
          for (const n of names) await runners[n](); // warm up (ORT's first run compiles its kernels)
          const timeOf = async (n) => {
            const t = performance.now();
            const own = await runners[n]();
            return typeof own === 'number' ? own : performance.now() - t;
          };
          const once = await timeOf('relaxed');
          const calls = Math.max(1, Math.min(50, Math.round(400 / once)));
          const callsOf = (n) => (n === 'ort' ? Math.max(1, Math.ceil(calls / 4)) : calls);
          const times = Object.fromEntries(names.map((n) => [n, []]));
          const roundMedians = Object.fromEntries(names.map((n) => [n, []]));
          for (let r = 0; r < rounds; r++) {
            if (ceiling) {
              ceilingRuns['mul+add'].push(ceiling.measureCeiling({ trials: 3 }).gflops);
              ceilingRuns.relaxed_madd.push(ceiling.measureCeiling({ trials: 3, fma: true }).gflops);
            }
            for (const n of r % 2 === 0 ? names : [...names].reverse()) {
              for (let c = 0; c < callsOf(n); c++) times[n].push(await timeOf(n));
              roundMedians[n].push(median(times[n].slice(-callsOf(n))));
            }
          }
          const flops = decodeShape ? decodeFlops(decodeShape) : flopsOf(shape);
          out.shapes[name] = Object.fromEntries(
            names.map((n) => [
              n,
              {
                medianMs: median(times[n]),
                p10Ms: p10(times[n]),
                gflops: flops / median(times[n]) / 1e6,
                calls: times[n].length,
              },
            ]),
          );
          // Each round's ratio of two rows' medians in that round (run back to back), then the median and
          // quartiles of those ratios over the rounds: a slow spell that spans a round slows both rows of it.
          const perRound = (slow, fast) => {
            const ratios = roundMedians[slow].map((t, r) => t / roundMedians[fast][r]).sort((a, b) => a - b);
            return {
              median: ratios[ratios.length >> 1],
              q1: ratios[ratios.length >> 2],
              q3: ratios[(3 * ratios.length) >> 2],
            };
          };
          const pairs = [
            ['fixed', 'relaxed'],
            ['fixed heap', 'relaxed heap'],
            ['fixed out', 'relaxed out'],
            ['ort', 'relaxed'],
          ];
          out.shapes[name].perRound = Object.fromEntries(
            pairs.filter(([a]) => runners[a]).map(([a, b]) => [`${a}/${b}`, perRound(a, b)]),
          );
        }
        if (ceiling) {
          out.ceilings = Object.fromEntries(Object.entries(ceilingRuns).map(([n, xs]) => [n, median(xs)]));
        }
        return out;
      },
      { shapes, rounds, models, withHeap, withOut, withDecode, cacheDtype, arithmetic },
    );
    const cache = withDecode ? { cache: `${cacheDtype}${arithmetic ? `:${arithmetic}` : ''}` } : {};
    console.log(JSON.stringify({ browser: browserName, rounds, ...cache, ...result }));
    const perRoundText = (r, pair) => {
      const x = r.perRound[pair];
      return x ? `; per round ${x.median.toFixed(3)}x [${x.q1.toFixed(3)}, ${x.q3.toFixed(3)}]` : '';
    };
    for (const [name, r] of Object.entries(result.shapes)) {
      const ort = r.ort
        ? `  ORT std ${r.ort.medianMs.toFixed(2)} ms (relaxed ${(r.ort.medianMs / r.relaxed.medianMs).toFixed(2)}x faster` +
          `${perRoundText(r, 'ort/relaxed')})`
        : '';
      console.log(
        `${name}: ${result.builds.relaxed} ${r.relaxed.medianMs.toFixed(3)} ms ${r.relaxed.gflops.toFixed(1)} GFLOP/s, ` +
          `${result.builds.fixed} ${r.fixed.medianMs.toFixed(3)} ms ${r.fixed.gflops.toFixed(1)} GFLOP/s: ${(r.fixed.medianMs / r.relaxed.medianMs).toFixed(3)}x` +
          ` (10th percentiles ${r.relaxed.p10Ms.toFixed(3)} / ${r.fixed.p10Ms.toFixed(3)} ms: ${(r.fixed.p10Ms / r.relaxed.p10Ms).toFixed(3)}x` +
          `${perRoundText(r, 'fixed/relaxed')})${ort}`,
      );
      for (const [row, label] of [
        ['heap', 'heap tensors'],
        ['out', 'copy mode, out given'],
      ]) {
        const [a, b] = [r[`relaxed ${row}`], r[`fixed ${row}`]];
        if (!a) continue;
        console.log(
          `  ${label}: ${a.medianMs.toFixed(3)} / ${b.medianMs.toFixed(3)} ms: ${(b.medianMs / a.medianMs).toFixed(3)}x` +
            ` (10th percentiles ${(b.p10Ms / a.p10Ms).toFixed(3)}x${perRoundText(r, `fixed ${row}/relaxed ${row}`)})`,
        );
      }
    }
    if (result.ceilings) {
      const c = result.ceilings;
      console.log(
        `ceilings (median of ${rounds}): mul+add ${c['mul+add'].toFixed(1)}, relaxed_madd ${c.relaxed_madd.toFixed(1)} GFLOP/s: ` +
          `${(c.relaxed_madd / c['mul+add']).toFixed(3)}x`,
      );
    }
  },
  { engine },
);
