// Issue #14's decode job contestants (bench/lib/jobs.mjs, kind 'decode'): one decode step of a KV cache of
// each dtype and arithmetic, onnxruntime-web's GroupQueryAttention step and plain JS, each checked against
// the float64 reference over what the cache stores. Run by bench/lib/jobs-run.mjs. Node only.
import { readFileSync } from 'node:fs';
import { makeInputs } from '../../scripts/lib/prng.mjs';
import { attentionRows, sampleRows } from '../../scripts/lib/reference.mjs';
import { roundAsStored } from '../../scripts/lib/cache-rounding.mjs';
import { float16Value } from '../../scripts/lib/float16.mjs';
import { sliceRows } from '../../scripts/lib/golden-runner.mjs';
import { checkSummary, distUrl, evictor, failure } from './jobs-common.mjs';
import {
  decodeShapeByName,
  decodeBytes,
  decodeFlops,
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

const range = (n) => Int32Array.from({ length: n }, (_, i) => i);

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

export async function* decodeContestants(job, { seed, onPhase, disposers }) {
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
      yield failure(name, error);
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
