#!/usr/bin/env node
// Old against new in one Chromium page (or --engine firefox): `node bench/browser/wasm-ab.mjs [--engine firefox] [--shapes bert] [--rounds 16]
// [--out] label=path.wasm ... [a/b ...]`. Each label is an instance created with `createMHA({ wasmBinary })`
// from that file (paths relative to the repository root; a relaxed file takes its own glue, as the loader
// does), so two builds of the same kind (e.g. a saved copy of dist/mha-relaxed.wasm and the rebuilt one)
// run side by side, which relaxed-ab.mjs (relaxed against fixed of one dist/) cannot do. Per round the
// instances run back to back, the order alternating; for each pair a/b it prints time(a)/time(b) of the
// 10th percentiles over all calls, and the median and quartiles over the rounds of each round's ratio of
// lower quartiles: with load averages far above the 2 cores most calls are slowed by other processes,
// unevenly, and the medians of whole runs swing by tens of percent. --out passes a reused `out` array.
import { option, withBenchPage } from './bench-page.mjs';

const args = process.argv.slice(2);
const shapes = option(args, '--shapes', 'bert').split(',');
const rounds = Number(option(args, '--rounds', '16'));
const useOut = args.includes('--out');
const builds = Object.fromEntries(
  args.filter((a) => /^[\w-]+=/.test(a)).map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]),
);
const pairs = args.filter((a) => /^[\w-]+\/[\w-]+$/.test(a)).map((a) => a.split('/'));
if (Object.keys(builds).length < 2) throw new Error('give at least two label=path.wasm arguments');

const engine = option(args, '--engine', 'chromium');
await withBenchPage(
  async (page, browserName) => {
    const result = await page.evaluate(
      async ({ builds, shapes, rounds, useOut }) => {
        const { createMHA } = await import('/dist/index.js');
        const { shapeByName } = await import('/bench/lib/shapes.mjs');
        const { makeInputs } = await import('/scripts/lib/prng.mjs');
        const impls = {};
        for (const [label, path] of Object.entries(builds)) {
          impls[label] = await createMHA({ wasmBinary: new Uint8Array(await (await fetch(`/${path}`)).arrayBuffer()) });
        }
        const labels = Object.keys(impls);
        const sorted = (xs) => [...xs].sort((a, b) => a - b);
        const out = { builds: Object.fromEntries(labels.map((l) => [l, impls[l].info.build])), shapes: {} };
        for (const name of shapes) {
          const shape = shapeByName(name);
          const { q, k, v } = makeInputs(shape);
          const options = {
            batch: shape.B,
            seqLen: shape.S,
            kvSeqLen: shape.T,
            dModel: shape.D,
            numHeads: shape.H,
            causal: !!shape.causal,
          };
          if (useOut) options.out = new Float32Array(shape.B * shape.S * shape.D);
          for (const l of [...labels, ...labels]) impls[l].multiHeadAttention(q, k, v, options); // warm up
          const t0 = performance.now();
          impls[labels[0]].multiHeadAttention(q, k, v, options);
          const calls = Math.max(1, Math.min(30, Math.round(200 / (performance.now() - t0))));
          const times = Object.fromEntries(labels.map((l) => [l, []]));
          const roundFast = [];
          for (let r = 0; r < rounds; r++) {
            const fast = {};
            for (const l of r % 2 === 0 ? labels : [...labels].reverse()) {
              const roundTimes = [];
              for (let c = 0; c < calls; c++) {
                const t = performance.now();
                impls[l].multiHeadAttention(q, k, v, options);
                roundTimes.push(performance.now() - t);
              }
              times[l].push(...roundTimes);
              fast[l] = sorted(roundTimes)[roundTimes.length >> 2];
            }
            roundFast.push(fast);
          }
          out.shapes[name] = { calls, times, roundFast };
        }
        return out;
      },
      { builds, shapes, rounds, useOut },
    );
    const sorted = (xs) => [...xs].sort((a, b) => a - b);
    const at = (xs, f) => sorted(xs)[Math.floor((xs.length - 1) * f)];
    console.log(
      `${browserName}: ${Object.entries(result.builds)
        .map(([l, b]) => `${l} = ${builds[l]} (${b})`)
        .join(', ')}`,
    );
    for (const [name, r] of Object.entries(result.shapes)) {
      console.log(
        `${name} (${rounds} rounds x ${r.calls} calls${useOut ? ', out reused' : ''}): ` +
          Object.entries(r.times)
            .map(([l, ts]) => `${l} median ${at(ts, 0.5).toFixed(3)} ms, 10th percentile ${at(ts, 0.1).toFixed(3)} ms`)
            .join('; '),
      );
      for (const [a, b] of pairs) {
        const ratios = r.roundFast.map((f) => f[a] / f[b]);
        console.log(
          `  ${a}/${b} (time): 10th percentiles ${(at(r.times[a], 0.1) / at(r.times[b], 0.1)).toFixed(3)}; per round ` +
            `median ${at(ratios, 0.5).toFixed(3)}, quartiles ${at(ratios, 0.25).toFixed(3)}-${at(ratios, 0.75).toFixed(3)}, range ${at(ratios, 0).toFixed(3)}-${at(ratios, 1).toFixed(3)}`,
        );
      }
    }
  },
  { engine },
);
