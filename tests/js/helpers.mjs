// Shared by the JS tests (and the browser and consumer suites): the golden reader and its tolerance rule
// (scripts/lib/golden.mjs, scripts/lib/golden-runner.mjs), and the project's one seeded PRNG and one
// float64 reference (scripts/lib/prng.mjs, scripts/lib/reference.mjs), adapted to the API's option names.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import v8 from 'node:v8';
import vm from 'node:vm';
import { roundToFloat16 } from '../../scripts/lib/float16.mjs';
import {
  goldenDir,
  goldenOptions,
  goldenV2Dir,
  goldenV3Dir,
  goldenV4Dir,
  loadGoldenCases,
  readGolden,
  repoRoot,
} from '../../scripts/lib/golden.mjs';
import { checkLse, checkOut, checkWeights, compare, sliceRows } from '../../scripts/lib/golden-runner.mjs';
import { mulberry32, normalSampler, randomNormal } from '../../scripts/lib/prng.mjs';
import { attention } from '../../scripts/lib/reference.mjs';

// The tolerance rules live in the golden runner (pure ECMAScript, also run by the pages and jsc); the
// golden reader, the float16 rounding, the PRNG and the reference in scripts/lib/ too (the bench uses them).
export {
  checkLse,
  checkOut,
  checkWeights,
  compare,
  goldenDir,
  goldenOptions,
  goldenV2Dir,
  goldenV3Dir,
  goldenV4Dir,
  loadGoldenCases,
  mulberry32,
  normalSampler,
  randomNormal,
  readGolden,
  repoRoot,
  roundToFloat16,
  sliceRows,
};

/** True when two typed arrays hold the same bytes. */
export function bitsEqual(a, b) {
  return (
    a.length === b.length &&
    Buffer.compare(
      Buffer.from(a.buffer, a.byteOffset, a.byteLength),
      Buffer.from(b.buffer, b.byteOffset, b.byteLength),
    ) === 0
  );
}

/**
 * Runs an ES module source in a child Node (with `nodeFlags` before it, e.g. V8 feature flags); resolves
 * { code, stdout, stderr, ms } (ms: spawn to exit).
 */
export function runChild(source, { timeoutMs = 20000, nodeFlags = [] } = {}) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [...nodeFlags, '--input-type=module', '-e', source], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`child did not exit within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}

/** Expects `thunk` to throw an error of that class whose message contains every fragment. */
export function expectError(thunk, ErrorClass, fragments) {
  assert.throws(thunk, (error) => {
    assert.ok(
      error instanceof ErrorClass,
      `expected ${ErrorClass.name}, got ${error?.constructor?.name}: ${error?.message}`,
    );
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
  if (spec.mask === true || spec.mask === 'random')
    options.mask = Uint8Array.from({ length: B * S * T }, () => (random() < 0.7 ? 1 : 0));
  if (spec.mask === 'padding') {
    options.mask = new Uint8Array(B * S * T);
    for (let b = 0; b < B; b++) {
      for (let i = 0; i < S; i++) options.mask.fill(1, (b * S + i) * T, (b * S + i) * T + Math.max(0, T - 37 * b));
    }
  }
  return {
    q: randomNormal(B * S * D, random),
    k: randomNormal(B * T * kvD, random),
    v: randomNormal(B * T * kvD, random),
    options,
  };
}

/** The reference's shape letters for API options. */
function referenceShape(o) {
  return {
    B: o.batch,
    S: o.seqLen,
    T: o.kvSeqLen ?? o.seqLen,
    D: o.dModel,
    H: o.numHeads,
    Hkv: o.numKvHeads,
    causal: o.causal ?? false,
    scale: o.scale,
    mask: o.mask,
    queryOffset: o.queryOffset,
    kvLengths: o.kvLengths,
    window: o.window,
    softcap: o.softcap,
    alibiSlopes: o.alibiSlopes,
    bias: o.bias,
    biasShape: o.biasShape,
    emptyRows: o.emptyRows,
  };
}

/**
 * The spec, independently, in float64 JS (scripts/lib/reference.mjs), called with the API's options:
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
