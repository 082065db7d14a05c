// The call bench/perf-wasm.sh profiles: `node bench/lib/perf-call.mjs file.wasm shape calls` creates an
// instance of that wasm file (createMHA({ wasmBinary }), 1 thread), copies the shape's seeded q, k, v onto
// its heap once, and makes `calls` calls on those heap tensors after one warm-up call, printing the time.
import fs from 'node:fs';
import { createMHA } from '../../dist/index.js';
import { flopsOf, shapeByName } from './shapes.mjs';
import { makeInputs } from './prng.mjs';

const [wasm, shapeName, callsText] = process.argv.slice(2);
const shape = shapeByName(shapeName);
const calls = Number(callsText);
const mha = await createMHA({ wasmBinary: new Uint8Array(fs.readFileSync(wasm)) });
const { q, k, v } = makeInputs(shape);
const [tq, tk, tv] = [q, k, v].map((a) => { const t = mha.allocate(a.length); t.set(a); return t; });
const options = { batch: shape.B, seqLen: shape.S, kvSeqLen: shape.T, dModel: shape.D, numHeads: shape.H, causal: !!shape.causal,
  out: mha.allocate(q.length) };
mha.multiHeadAttention(tq, tk, tv, options);
const started = performance.now();
for (let i = 0; i < calls; i++) mha.multiHeadAttention(tq, tk, tv, options);
const ms = (performance.now() - started) / calls;
console.log(`${mha.info.build} ${shapeName}: ${ms.toFixed(2)} ms per call, ${(flopsOf(shape) / ms / 1e6).toFixed(1)} GFLOP/s (under perf)`);
mha.dispose();
