// The call bench/perf-wasm.sh profiles: `node bench/lib/perf-call.mjs file.wasm shape calls` runs the bench's
// heap-tensor row of mha-wasm (bench/impls/mha-wasm.mjs: the shape's seeded q, k, v copied onto the heap
// once, 1 thread) on an instance of that wasm file, one warm-up call and then `calls` calls, and prints
// the time.
import fs from 'node:fs';
import { create } from '../impls/mha-wasm.mjs';
import { flopsOf, shapeByName } from './shapes.mjs';
import { shapeWithInputs } from '../../scripts/lib/prng.mjs';

const [wasm, shapeName, callsText] = process.argv.slice(2);
const calls = Number(callsText);
const { shape, inputs } = shapeWithInputs(shapeByName(shapeName));
const row = await create(shape, { heapTensors: true, inputs, wasmBinary: new Uint8Array(fs.readFileSync(wasm)) });
const { q, k, v } = inputs;
row.run(q, k, v);
const started = performance.now();
for (let i = 0; i < calls; i++) row.run(q, k, v);
const ms = (performance.now() - started) / calls;
console.log(
  `${row.info.build} ${shapeName}: ${ms.toFixed(2)} ms per call, ${(flopsOf(shape) / ms / 1e6).toFixed(1)} GFLOP/s (under perf)`,
);
row.dispose();
