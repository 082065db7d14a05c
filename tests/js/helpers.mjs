// Shared by the JS tests (and the browser and consumer suites): the golden reader and its tolerance rule,
// and the project's one seeded PRNG and one float64 reference (bench/lib/prng.mjs, bench/lib/reference.mjs),
// adapted to the API's option names.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { mulberry32, normalSampler, randomNormal } from '../../bench/lib/prng.mjs';
import { attention } from '../../bench/lib/reference.mjs';
import { checkLse, checkOut, checkWeights, compare, sliceRows } from '../browser/golden-runner.mjs';

// The tolerance rules live in the golden runner (pure ECMAScript, also run by the pages and jsc).
export { checkLse, checkOut, checkWeights, compare, mulberry32, normalSampler, randomNormal, sliceRows };

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// The PyTorch golden vectors are test fixtures of this repository (tests/golden/README.md).
export const goldenDir = process.env.MHA_GOLDEN_DIR ?? path.join(repoRoot, 'tests/golden/v1');
export const goldenV2Dir = path.join(repoRoot, 'tests/golden/v2');

/** The cases of a golden set (`cases.json`); readGolden finds each case's files in its set's folder. */
export function loadGoldenCases(dir = goldenDir) {
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
  // Not enumerable: a case stays the plain data of cases.json (JSON.stringify, deepEqual).
  for (const c of cases) Object.defineProperty(c, 'dir', { value: dir });
  return cases;
}

/** Reads a golden file as the typed array its role implies (mask: Uint8Array, others: Float32Array). */
export function readGolden(c, role) {
  const file = c.files[role];
  if (file === undefined) throw new Error(`golden case ${c.name} has no ${role} file`);
  const bytes = fs.readFileSync(path.join(c.dir ?? goldenDir, file));
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  return role === 'mask' ? new Uint8Array(copy) : new Float32Array(copy);
}

/**
 * A v2 case's options by their API names (cases.json writes Infinity in a window as "Infinity"), with its
 * bias read from its file; plus its dims.
 */
export function goldenOptions(c) {
  const options = { batch: c.batch, seqLen: c.seqLen, kvSeqLen: c.kvSeqLen, dModel: c.dModel, numHeads: c.numHeads, ...c.options };
  if (options.window) options.window = options.window.map((w) => (w === 'Infinity' ? Infinity : w));
  if (c.files.mask) options.mask = readGolden(c, 'mask');
  if (c.files.bias) options.bias = readGolden(c, 'bias');
  return options;
}

/** True when two typed arrays hold the same bytes. */
export function bitsEqual(a, b) {
  return a.length === b.length && Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

/**
 * Runs an ES module source in a child Node (with `nodeFlags` before it, e.g. V8 feature flags); resolves
 * { code, stdout, stderr, ms } (ms: spawn to exit).
 */
export function runChild(source, { timeoutMs = 20000, nodeFlags = [] } = {}) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [...nodeFlags, '--input-type=module', '-e', source], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`child did not exit within ${timeoutMs} ms\n${stdout}\n${stderr}`)); }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** Expects `thunk` to throw an error of that class whose message contains every fragment. */
export function expectError(thunk, ErrorClass, fragments) {
  assert.throws(thunk, (error) => {
    assert.ok(error instanceof ErrorClass, `expected ${ErrorClass.name}, got ${error?.constructor?.name}: ${error?.message}`);
    for (const f of fragments) assert.ok(error.message.includes(f), `message "${error.message}" lacks "${f}"`);
    return true;
  });
}

let collect;
/**
 * Full garbage collections, so garbage result arrays do not hide or fake a change of memory. Twice: the
 * backing stores of arrays found dead by the first one are only released by the next.
 */
export function fullGc() {
  if (!collect) {
    v8.setFlagsFromString('--expose-gc');
    collect = vm.runInNewContext('gc');
  }
  collect();
  collect();
}

/** A heap tensor of `instance` holding a copy of `array`. */
export function heapCopy(instance, array) {
  const tensor = instance.allocate(array.length);
  tensor.set(array);
  return tensor;
}

/**
 * Seeded inputs for a spec of API options: q (B,S,D), k and v (B,T,Hkv·Dh); `mask: true` (or 'random')
 * makes a mask with about 70 % visible keys, 'padding' one that hides the last 37·b keys of batch item b.
 * Returns them with the options to call with (the mask as a Uint8Array).
 */
export function randomProblem(spec, seed) {
  const random = mulberry32(seed);
  const { batch: B, seqLen: S, dModel: D, numHeads: H } = spec;
  const T = spec.kvSeqLen ?? S;
  const kvD = (D / H) * (spec.numKvHeads ?? H);
  const given = spec.mask instanceof Uint8Array || Array.isArray(spec.mask) ? spec.mask : undefined;
  const options = { ...spec, kvSeqLen: T, causal: spec.causal ?? false, mask: given };
  delete options.name;
  if (spec.mask === true || spec.mask === 'random') options.mask = Uint8Array.from({ length: B * S * T }, () => (random() < 0.7 ? 1 : 0));
  if (spec.mask === 'padding') {
    options.mask = new Uint8Array(B * S * T);
    for (let b = 0; b < B; b++) {
      for (let i = 0; i < S; i++) options.mask.fill(1, (b * S + i) * T, (b * S + i) * T + Math.max(0, T - 37 * b));
    }
  }
  return { q: randomNormal(B * S * D, random), k: randomNormal(B * T * kvD, random), v: randomNormal(B * T * kvD, random), options };
}

/** The reference's shape letters for API options. */
function referenceShape(o) {
  return {
    B: o.batch, S: o.seqLen, T: o.kvSeqLen ?? o.seqLen, D: o.dModel, H: o.numHeads, Hkv: o.numKvHeads, causal: o.causal ?? false,
    scale: o.scale, mask: o.mask, queryOffset: o.queryOffset, kvLengths: o.kvLengths, window: o.window, softcap: o.softcap,
    alibiSlopes: o.alibiSlopes, bias: o.bias, biasShape: o.biasShape, emptyRows: o.emptyRows,
  };
}

/**
 * The spec, independently, in float64 JS (bench/lib/reference.mjs), called with the API's options:
 * q (B,S,D), k and v (B,T,Hkv·Dh) -> out (B,S,D).
 */
export function referenceMHA(q, k, v, options) {
  return attention(q, k, v, referenceShape(options));
}

/** The reference's out (B,S,D), lse (B,H,S) and weights (B,H,S,T) for the API's options. */
export function referenceAll(q, k, v, options) {
  const shape = referenceShape(options);
  const lse = new Float64Array(shape.B * shape.H * shape.S);
  const weights = new Float64Array(shape.B * shape.H * shape.S * shape.T);
  const out = attention(q, k, v, shape, undefined, { lse, weights });
  return { out, lse, weights };
}

/**
 * What the README examples (examples/node.mjs, examples/browser.html, examples/vite) print as their last
 * row: the last query row of the causal call sees every key of its batch item (the first row would only
 * see itself, and equal the input whatever the kernel did).
 */
export function expectedLastRow() {
  const x = Float32Array.from({ length: 120 }, (_, i) => Math.sin(i));
  const out = referenceMHA(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3, causal: true });
  return Array.from(out.subarray(108), (n) => n.toFixed(4)).join(' ');
}

/** The spec's example (batch 2, seq 5, d_model 12, 3 heads): golden q, k, v, out64 and its shape. */
export function loadSpecExample() {
  const example = loadGoldenCases().find((c) => c.name === 'example_b2_s5_d12_h3');
  const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(example, role));
  return { q, k, v, out64, shape: { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 } };
}

/**
 * x rounded to IEEE binary16 (nearest, ties to even; overflow to ±Infinity), returned as a number: what a
 * float16 KV cache stores (docs/spec.md Part 3). Exact: float64 scaling by powers of two loses nothing.
 */
export function roundToFloat16(x) {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  const quantum = 2 ** (Math.max(e, -14) - 10);  // below 2^-14 the subnormals' fixed 2^-24
  const y = a / quantum;
  const floor = Math.floor(y);
  const rest = y - floor;
  const units = rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
  const rounded = units * quantum;
  return Math.sign(x) * (rounded > 65504 ? Infinity : rounded);
}

