// Single-core WASM SIMD ceilings: hand-assembled modules whose hot loops run independent f32x4 chains, no
// loads or stores, 8 FLOPs per multiply-add. Three forms:
//   mul+add       f32x4.mul then f32x4.add (SIMD128 has no fused multiply-add): prefill's limit today. Four
//                 loops, the fastest of which counts: 12 or 14 chains x_i = x_i * m + c (a multiply feeding
//                 an add, as in a micro-kernel's step), and 7 or 8 chains x_i = x_i * m beside as many
//                 chains y_i = y_i + c, which no latency bounds. On the AMD EPYC VM of earlier runs 12
//                 chains were the peak; on a Xeon whose adds issue on 3 ports and multiplies on 2 they were
//                 latency-bound, and the simd128 micro-kernels ran at 112 % of them. There (GFLOP/s):
//                   Node 20       12: 31.0  14: 32.6  7 + 7: 31.6  8 + 8: 33.8   micro-kernels 34.0
//                   Chromium 156  12: 30.6  14: 32.2  7 + 7: 32.4  8 + 8: 24.6 (spills)   34.0-34.2
//                 so in Chromium the ceiling stays about 5 % under what its micro-kernels reach.
//   relaxed_madd  12 chains of one f32x4.relaxed_madd per step (Relaxed SIMD): the limit of an FMA build,
//                 measured only where the engine validates the opcode (8 chains: 40.4, 10-14: 45.4 there).
// The bytes are emitted here directly (no build step; the encoding helpers are wasm-bytes.mjs'). Isomorphic:
// its only imports are wasm-bytes.mjs and bandwidth.mjs.
import { measureBandwidth } from './bandwidth.mjs';
import { uleb, str, section, vec } from './wasm-bytes.mjs';

const CHAINS = 12;
const UNROLL = 4; // steps per loop iteration, to keep loop overhead negligible

function f32bytes(x) {
  return [...new Uint8Array(new Float32Array([x]).buffer)];
}

// Opcodes.
const I32 = 0x7f,
  F32 = 0x7d,
  V128 = 0x7b;
const LOCAL_GET = 0x20,
  LOCAL_SET = 0x21,
  LOCAL_TEE = 0x22;
const F32_CONST = 0x43,
  I32_CONST = 0x41,
  I32_SUB = 0x6b,
  F32_ADD = 0x92;
const LOOP = 0x03,
  BR_IF = 0x0d,
  END = 0x0b,
  BLOCKTYPE_EMPTY = 0x40;
const SIMD = 0xfd;
const F32X4_SPLAT = [SIMD, ...uleb(19)];
const F32X4_EXTRACT_LANE = [SIMD, ...uleb(31)];
const F32X4_ADD = [SIMD, ...uleb(228)];
const F32X4_MUL = [SIMD, ...uleb(230)];
const F32X4_RELAXED_MADD = [SIMD, ...uleb(261)]; // relaxed_madd(a, b, c) = a * b + c, fused or not

/** The mul+add loops: `chains` multiply-add chains, or (split) `chains` multiply chains beside as many add chains. */
const MUL_ADD_FORMS = [{ chains: 12 }, { chains: 14 }, { chains: 7, split: true }, { chains: 8, split: true }];
/** The relaxed_madd loop. */
const FMA_FORMS = [{ chains: CHAINS, fma: true }];

/**
 * Bytes of the module: export `run(iterations: i32) -> f32`.
 * @param {{fma?: boolean, chains?: number, split?: boolean}} [o] fma: one relaxed_madd per step instead of
 *   mul + add; split: `chains` chains x = x * m beside `chains` chains y = y + c (m = 1: no denormals)
 */
export function ceilingModuleBytes({ fma = false, chains = CHAINS, split = false } = {}) {
  // Locals: 0 = iterations (param), then the chain values, then m and c.
  const values = split ? 2 * chains : chains;
  const M = values + 1,
    C = values + 2;
  const body = [];
  body.push(F32_CONST, ...f32bytes(split ? 1 : 0.9999), ...F32X4_SPLAT, LOCAL_SET, M);
  body.push(F32_CONST, ...f32bytes(1e-4), ...F32X4_SPLAT, LOCAL_SET, C);
  for (let i = 1; i <= values; i++) body.push(F32_CONST, ...f32bytes(1 + i / 64), ...F32X4_SPLAT, LOCAL_SET, i);
  body.push(LOOP, BLOCKTYPE_EMPTY);
  for (let u = 0; u < UNROLL; u++) {
    if (split) {
      for (let i = 1; i <= chains; i++) {
        body.push(LOCAL_GET, i, LOCAL_GET, M, ...F32X4_MUL, LOCAL_SET, i);
        body.push(LOCAL_GET, chains + i, LOCAL_GET, C, ...F32X4_ADD, LOCAL_SET, chains + i);
      }
      continue;
    }
    for (let i = 1; i <= chains; i++) {
      if (fma) body.push(LOCAL_GET, i, LOCAL_GET, M, LOCAL_GET, C, ...F32X4_RELAXED_MADD, LOCAL_SET, i);
      else body.push(LOCAL_GET, i, LOCAL_GET, M, ...F32X4_MUL, LOCAL_GET, C, ...F32X4_ADD, LOCAL_SET, i);
    }
  }
  // iterations -= 1; continue while nonzero
  body.push(LOCAL_GET, 0, I32_CONST, 1, I32_SUB, LOCAL_TEE, 0, BR_IF, 0, END);
  // Result: sum of lane 0 of every chain (keeps all chains live).
  body.push(F32_CONST, ...f32bytes(0));
  for (let i = 1; i <= values; i++) body.push(LOCAL_GET, i, ...F32X4_EXTRACT_LANE, 0, F32_ADD);
  body.push(END);
  const locals = vec([[...uleb(values + 2), V128]]);
  const func = [...locals, ...body];
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, vec([[0x60, ...vec([[I32]]), ...vec([[F32]])]])), // type: (i32) -> f32
    ...section(3, vec([uleb(0)])), // function 0 has type 0
    ...section(7, vec([[...str('run'), 0x00, 0x00]])), // export "run" = func 0
    ...section(10, vec([[...uleb(func.length), ...func]])),
  ]);
}

/** True when this engine compiles the relaxed_madd twin (Relaxed SIMD enabled). */
export function hasRelaxedSimd() {
  return WebAssembly.validate(ceilingModuleBytes({ fma: true }));
}

/** Calibrates a call of one form's module to ~targetMs and returns the GFLOP/s of `trials` calls. */
function timeForm(bytes, flops, targetMs, trials) {
  const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
  const run = instance.exports.run;
  let iterations = 1 << 14;
  for (;;) {
    const t = performance.now();
    run(iterations);
    const ms = performance.now() - t;
    if (ms > targetMs / 4 || iterations > 1 << 28) {
      iterations = Math.max(1, Math.round((iterations * targetMs) / Math.max(ms, 1e-3)));
      break;
    }
    iterations *= 4;
  }
  const samples = [];
  let sink = 0;
  for (let t = 0; t < trials; t++) {
    const t0 = performance.now();
    sink += run(iterations);
    const ms = performance.now() - t0;
    samples.push((iterations * flops) / (ms * 1e6));
  }
  return { samples, iterations, checksum: sink };
}

/**
 * Measures peak GFLOP/s: calibrates a call to ~targetMs, then takes the best of `trials` calls (mul+add:
 * of each of its loops in turn, and the fastest loop counts; `form` names it). Synchronous;
 * returns { gflops, samples, iterations, ... }. With fma: the relaxed_madd twin (the caller checks
 * hasRelaxedSimd() first: the module does not compile without the feature).
 */
export function measureCeiling({ targetMs = 100, trials = 15, fma = false } = {}) {
  // FLOPs of run(iterations): 8 per multiply-add of a step (per multiply and add when split).
  const forms = (fma ? FMA_FORMS : MUL_ADD_FORMS).map((f) => ({
    form: f.fma
      ? `${f.chains} relaxed_madd chains`
      : f.split
        ? `${f.chains} mul + ${f.chains} add chains`
        : `${f.chains} mul+add chains`,
    bytes: ceilingModuleBytes(f),
    flops: f.chains * UNROLL * 8,
  }));
  const timed = forms.map((f) => ({ ...f, ...timeForm(f.bytes, f.flops, targetMs, trials) }));
  const best = (t) => Math.max(...t.samples);
  const winner = timed.reduce((a, b) => (best(b) > best(a) ? b : a));
  const sorted = [...winner.samples].sort((a, b) => a - b);
  return {
    gflops: sorted[sorted.length - 1],
    medianGflops: sorted[Math.floor(sorted.length / 2)],
    samples: winner.samples,
    iterations: winner.iterations,
    form: winner.form,
    forms: Object.fromEntries(timed.map((t) => [t.form, best(t)])),
    unroll: UNROLL,
    op: fma ? 'f32x4.relaxed_madd' : 'f32x4.mul + f32x4.add',
    moduleBytes: winner.bytes.length,
    checksum: timed.reduce((sum, t) => sum + t.checksum, 0),
  };
}

/**
 * Every physical ceiling of this engine in one go, interleaved so a slow spell of the shared machine
 * falls on all of them: the mul+add ceiling, its relaxed_madd twin (null where the engine lacks Relaxed
 * SIMD) and the single-thread streaming-read bandwidth (bandwidth.mjs). Each figure is the best of
 * `rounds` measurements; `ratioFma` is fma / mul+add of the same round, median over rounds.
 */
export async function measureCeilings({ rounds = 3, bandwidth = true } = {}) {
  const fmaAvailable = hasRelaxedSimd();
  const mulAdd = [],
    fma = [],
    bw = [];
  for (let r = 0; r < rounds; r++) {
    mulAdd.push(measureCeiling({ trials: 7 }));
    if (fmaAvailable) fma.push(measureCeiling({ trials: 7, fma: true }));
    if (bandwidth) bw.push(measureBandwidth({ trials: 5 }));
  }
  const best = (xs, key) => xs.reduce((a, b) => (b[key] > a[key] ? b : a));
  const ratios = fma.map((f, r) => f.gflops / mulAdd[r].gflops).sort((a, b) => a - b);
  return {
    ...best(mulAdd, 'gflops'),
    fma: fmaAvailable ? { ...best(fma, 'gflops'), ratioFma: ratios[ratios.length >> 1] } : null,
    bandwidth: bandwidth ? best(bw, 'gbps') : null,
  };
}
