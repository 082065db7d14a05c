// The bench's interleaved jobs: each runs several contestants in one child process, round after round
// (bench/lib/interleave.mjs), and reports per-round ratios with their targets. Definitions only; the
// runner is bench/lib/jobs-run.mjs (Node). Isomorphic: no imports.
//
//   pairs   issue #13's option pairs (an option's call against the call without it) and bert-b8's
//           2 threads / 1 thread in copy mode, mha-wasm through the public API
//   decode  issue #14: decode steps of a fixed-length KV cache (B, T, H, Hkv, Dh), every cache dtype
//           (issue #32: bf16, int8, f16 with 10% subnormal halves, 2 threads), against
//           onnxruntime-web's GroupQueryAttention with past_key/past_value and plain JS; a generation loop;
//           a prefill through the cache against the stateless causal call

/** Decode shapes (B, T, H, Hkv, Dh): one new token per step, at position T - 1 (the cache then holds T). */
export const DECODE_SHAPES = [
  { name: 'decode-mha-8k', B: 1, T: 8192, H: 16, Hkv: 16, Dh: 64, threads: true, dtypes: true, subnormal: true },
  { name: 'decode-gqa-4k', B: 1, T: 4096, H: 32, Hkv: 8, Dh: 128, threads: true, dtypes: true },
  { name: 'decode-mqa-8k', B: 1, T: 8192, H: 16, Hkv: 1, Dh: 128, threads: true },
  { name: 'decode-b4', B: 4, T: 1024, H: 16, Hkv: 4, Dh: 64 },
];

/**
 * Bytes of one token's k and v of one KV head in a cache of `dtype` (docs/spec.md 4.8, 5.1, Dv = Dh):
 * float32 8·Dh, float16 and bfloat16 4·Dh, int8 2·Dh + 8·ceil(Dh / 32) (its float32 scales per 32 values),
 * int4 Dh + 8·ceil(Dh / 32).
 */
export const tokenHeadBytes = (dtype, Dh) =>
  dtype === 'int8' || dtype === 'int4'
    ? (dtype === 'int8' ? 2 : 1) * Dh + 8 * Math.ceil(Dh / 32)
    : (dtype === 'float32' ? 8 : 4) * Dh;
/** K and V bytes one step reads: B·Hkv·T tokens of tokenHeadBytes. */
export const decodeBytes = (s, dtype) => s.B * s.Hkv * s.T * tokenHeadBytes(dtype, s.Dh);
/** FLOPs of one step: 4·B·H·T·Dh (q·k and p·v, 2 FLOPs per multiply-add each). */
export const decodeFlops = (s) => 4 * s.B * s.H * s.T * s.Dh;

/** The generation loop's dims (decode-gqa-4k's heads) and lengths. */
export const LOOP = { B: 1, H: 32, Hkv: 8, Dh: 128, prefill: 512, steps: 256 };

/**
 * The decode steps' cache eviction, in bytes, for a last-level cache of `cacheBytes` (env.mjs; undefined
 * where sysfs does not say): a streaming read of twice it, at least 64 MiB and at most 512 MiB (a 2-core
 * VM may be shown a whole host's L3; reading more per step would stretch the decode jobs past their
 * budget). The job (jobs-run.mjs) and its report (report-jobs.mjs, from the run's recorded cache size)
 * both derive it here.
 */
export const evictionBytes = (cacheBytes) => Math.min(512 * 2 ** 20, Math.max(64 * 2 ** 20, 2 * (cacheBytes ?? 0)));

/** Every decode step's target: its share of the roofline max(K/V bytes / bandwidth, FLOPs / mul+add ceiling). */
export const ROOFLINE_TARGET = 0.7;

const speed = (a, b, target, bound) => ({ a, b, speed: true, target, ...bound });

/** Contestant names of the decode jobs. */
export const MHA_F32 = 'mha-wasm f32';
export const MHA_F16 = 'mha-wasm f16';
export const MHA_F32_2T = 'mha-wasm f32 2 threads';
export const MHA_F16_2T = 'mha-wasm f16 2 threads';
export const MHA_BF16 = 'mha-wasm bf16';
export const MHA_INT8 = 'mha-wasm int8';
/** The int8 and int4 caches with integer arithmetic (docs/spec.md 5.1), and int4 with float arithmetic. */
export const MHA_INT8_INTEGER = 'mha-wasm int8 integer';
export const MHA_INT4 = 'mha-wasm int4';
export const MHA_INT4_INTEGER = 'mha-wasm int4 integer';
/** A float16 cache whose keys and values are 10% subnormal halves (|x| < 2^-14): the widening's denormal case. */
export const MHA_F16_SUBNORMAL = 'mha-wasm f16, 10% subnormal halves';
/** The threaded build (mha-threads.wasm) with one thread: 2 threads against it isolate the split of the keys. */
export const MHA_F32_T1 = 'mha-wasm f32 threads build, 1 thread';
/** decode-gqa-4k with rope (issue #30): the query rotated per step, the new key once at append. */
export const MHA_F32_ROPE = 'mha-wasm f32 rope';
export const ORT_GQA = 'ORT GQA (past/present)';
export const PLAIN_JS = 'plain JS (f32 cache)';

/** Issue #32's targets per decode shape: each dtype's speed against float32, and 2 threads against 1. */
const DTYPE_TARGETS = {
  'decode-mha-8k': {
    [MHA_BF16]: 1.6,
    [MHA_F16]: 1.5,
    [MHA_F16_SUBNORMAL]: 1.4,
    [MHA_INT8]: 1.2,
    [MHA_INT8_INTEGER]: 2.5,
    [MHA_INT4_INTEGER]: 3,
    threads: 1.1,
  },
  'decode-gqa-4k': { [MHA_BF16]: 1.3, [MHA_INT8]: 1.1, [MHA_INT8_INTEGER]: 1.6, [MHA_INT4_INTEGER]: 1.6, threads: 1.6 },
  'decode-mqa-8k': { threads: 1.5 },
};
/** Every mha-wasm row against onnxruntime-web's GroupQueryAttention step (issue #32). */
const ORT_TARGET = 5;

const target = (bound) => (bound === undefined ? ['—', {}] : [`>= ${bound}x`, { atLeast: bound }]);

function decodeJob(s) {
  const rope = s.name === 'decode-gqa-4k';
  const goals = DTYPE_TARGETS[s.name] ?? {};
  const compact = s.dtypes ? [MHA_BF16, MHA_INT8, MHA_INT8_INTEGER, MHA_INT4, MHA_INT4_INTEGER] : [];
  const dtypes = [MHA_F16, ...compact, ...(s.subnormal ? [MHA_F16_SUBNORMAL] : [])];
  const threads = s.threads ? [MHA_F32_2T, MHA_F16_2T, MHA_F32_T1] : [];
  const contestants = [MHA_F32, ...dtypes, ...threads, ...(rope ? [MHA_F32_ROPE] : []), ORT_GQA, PLAIN_JS];
  const ratios = dtypes.map((name) => {
    const [text, bound] = target(goals[name]);
    return speed(name, MHA_F32, text === '—' ? '—' : `${text} (speed over f32)`, bound);
  });
  for (const name of [MHA_F32, ...dtypes])
    ratios.push(speed(name, ORT_GQA, `>= ${ORT_TARGET}x ORT`, { atLeast: ORT_TARGET }));
  ratios.push(speed(MHA_F32, PLAIN_JS, '—'));
  if (rope) ratios.push(speed(MHA_F32_ROPE, MHA_F32, '<= 1.05x the time without rope', { atMost: 1.05, speed: false }));
  if (s.threads) {
    // Against the default (single-threaded) build, what turning threads on gives; against the threaded
    // build on 1 thread, the split across the pool alone.
    const [text, bound] = target(goals.threads);
    ratios.push(
      speed(MHA_F32_2T, MHA_F32, `${text} (2 threads / 1 thread)`, bound),
      speed(MHA_F16_2T, MHA_F16, '—'),
      speed(MHA_F32_2T, MHA_F32_T1, '— (same build)'),
    );
    for (const name of threads.slice(0, 2))
      ratios.push(speed(name, ORT_GQA, `>= ${ORT_TARGET}x ORT`, { atLeast: ORT_TARGET }));
  }
  return { name: s.name, group: 'decode', kind: 'decode', shape: s.name, contestants, ratios };
}

/** ragged-decode (issue #31): one step of 4 sequences of these lengths (after the step) in one cache. */
export const RAGGED = { T: 4096, H: 32, Hkv: 8, Dh: 64, lengths: [4096, 1024, 256, 64] };
export const RAGGED_ONE = 'one ragged cache (B 4)';
export const RAGGED_SEPARATE = 'four batch-1 caches, one after another';
export const RAGGED_PADDED = 'one cache padded to 4096 keys (B 4)';
/** cache-save-load (issue #31): a 32-layer model's float16 caches of one 4096-token sequence. */
export const SAVE_LOAD = { caches: 32, tokens: 4096, Hkv: 8, Dh: 64 };
export const SAVE = 'save() x 32';
export const LOAD = 'loadKVCache x 32';
export const COPY = 'copy of the saved bytes x 32';
/**
 * Shared-prefix decode (docs/spec.md 5.2): 4 sequences continuing one prompt of Lp tokens, each with `own`
 * tokens of its own after the step, against one sequence of as many keys and 4 sequences that store it.
 */
export const PREFIX_SHARED = '4 sequences over a shared prefix';
export const PREFIX_ONE = 'one sequence of Lp + own keys';
export const PREFIX_COPIES = '4 sequences that each store the prefix';
const prefixJob = (name, prefix, { copies, one }) => ({
  name,
  group: 'serving',
  kind: 'prefix',
  prefix,
  contestants: [PREFIX_SHARED, PREFIX_ONE, PREFIX_COPIES],
  ratios: [
    speed(PREFIX_SHARED, PREFIX_ONE, one ? `<= ${one}x the time of one sequence's step` : '—', {
      speed: false,
      ...(one ? { atMost: one } : {}),
    }),
    speed(PREFIX_SHARED, PREFIX_COPIES, `>= ${copies}x faster than 4 copies of the prefix`, { atLeast: copies }),
  ],
});
/** Beam search's reorder (docs/spec.md 5.4) against the step of the 4 sequences it reorders. */
export const REORDER_STEP = 'step of 4 sequences over the prefix';
export const REORDER = 'reorder of the 4 sequences (two swaps)';
/** A sliding-window layer's ring cache (docs/spec.md 5.5) after 16 C tokens, against a plain cache of C. */
export const RING_SHAPE = { C: 1024, seen: 16384, H: 32, Hkv: 8, Dh: 64 };
export const RING_CACHE = 'ring of 1024 after 16384 tokens, window 1023';
export const RING_PLAIN = 'plain cache of 1024 tokens, window 1023';
/** tiny-llama's 4 samples of one prompt held once (models/lib/samples.mjs), against 4 separate sessions. */
export const SAMPLES_SHAPE = {
  samples: 4,
  tokens: 32,
  prompt: 'And God said, Let there be light: and there was light. ',
};
export const SAMPLES_SHARED = '4 samples over the prompt held once';
export const SAMPLES_SEPARATE = '4 sessions, one after another';
/** The longest-context job (issue #32): a Llama-3.2-1B-shaped cache, one KVCache per layer. */
export const LLAMA_1B = { layers: 16, Hkv: 8, Dh: 64 };

const pair = (name, a, b, ratio) => ({
  name,
  group: 'pairs',
  kind: 'stateless',
  contestants: [a, b].map(([impl, shape]) => ({ name: `${impl} ${shape}`, impl, shape })),
  ratios: [{ a: `${a[0]} ${a[1]}`, b: `${b[0]} ${b[1]}`, ...ratio }],
});

export const JOBS = [
  // Issue #13 (1 thread). The pairs' FLOP counts are equal, so GFLOP/s ratios are time ratios.
  pair('pair-gqa2k', ['mha-wasm', 'gqa2k'], ['mha-wasm', 'gqa2k-mha'], {
    speed: true,
    target: '>= 1.0x the GFLOP/s of Hkv = H',
    atLeast: 1.0,
  }),
  pair('pair-window8k', ['mha-wasm', 'window8k'], ['mha-wasm', 'causal8k'], {
    speed: true,
    target: '>= 6x faster than full causal',
    atLeast: 6,
  }),
  pair('pair-bert-bias', ['mha-wasm', 'bert-bias'], ['mha-wasm', 'bert'], {
    speed: false,
    target: '<= 1.25x the time of bert',
    atMost: 1.25,
  }),
  pair('pair-bert-alibi', ['mha-wasm', 'bert-alibi'], ['mha-wasm', 'bert'], {
    speed: false,
    target: '<= 1.15x the time of bert',
    atMost: 1.15,
  }),
  pair('pair-bert-softcap', ['mha-wasm', 'bert-softcap'], ['mha-wasm', 'bert'], {
    speed: false,
    target: '<= 1.3x the time of bert',
    atMost: 1.3,
  }),
  // Issue #30: the standard definitions against the calls they replace (1 thread).
  pair('pair-mla', ['mha-wasm', 'mla-prefill'], ['mha-wasm', 'mla-prefill-padded'], {
    speed: true,
    target: '>= 1.12x faster than V padded to Dh 192',
    atLeast: 1.12,
  }),
  pair('pair-bert-f16', ['mha-wasm', 'bert-f16'], ['mha-wasm', 'bert'], {
    speed: false,
    target: '<= 1.1x the time of bert (float32)',
    atMost: 1.1,
  }),
  pair('pair-llama-rope', ['mha-wasm', 'llama-rope'], ['mha-wasm', 'gqa2k'], {
    speed: false,
    target: '<= 1.1x the time without rope',
    atMost: 1.1,
  }),
  pair('pair-bert-sinks', ['mha-wasm', 'bert-sinks'], ['mha-wasm', 'bert'], {
    speed: false,
    target: '<= 1.05x the time of bert',
    atMost: 1.05,
  }),
  // Issue #14: the copies of copy mode (Float32Arrays in and out) run on the calling thread.
  pair('threads-bert-b8', ['mha-wasm-2t', 'bert-b8'], ['mha-wasm', 'bert-b8'], {
    speed: true,
    target: '>= 1.8x (2 threads / 1 thread, copy mode)',
    atLeast: 1.8,
  }),
  ...DECODE_SHAPES.map(decodeJob),
  {
    name: 'decode-loop',
    group: 'decode',
    kind: 'loop',
    contestants: [MHA_F32, MHA_F16],
    ratios: [speed(MHA_F16, MHA_F32, '—')],
  },
  {
    name: 'ragged-decode',
    group: 'decode',
    kind: 'ragged',
    contestants: [RAGGED_ONE, RAGGED_SEPARATE, RAGGED_PADDED],
    ratios: [
      speed(RAGGED_ONE, RAGGED_SEPARATE, '<= 1.1x the time of the four separate steps', { atMost: 1.1, speed: false }),
      speed(RAGGED_ONE, RAGGED_PADDED, '>= 2.5x faster than padded (keys: 3x)', { atLeast: 2.5 }),
    ],
  },
  {
    name: 'cache-save-load',
    group: 'decode',
    kind: 'saveload',
    contestants: [SAVE, LOAD, COPY],
    ratios: [
      speed(SAVE, COPY, '— (speed against a plain copy of the bytes: 1 = copy bandwidth)'),
      speed(LOAD, COPY, '—'),
    ],
  },
  { name: 'context-llama-1b', group: 'decode', kind: 'context', contestants: [], ratios: [] },
  // models/tiny-llama's validation bits per byte per cache dtype and arithmetic (bench/lib/jobs-bits.mjs).
  { name: 'bits-tiny-llama', group: 'decode', kind: 'bits', contestants: [], ratios: [] },
  // decode-mha-8k's and decode-gqa-4k's heads (bench/lib/jobs-prefix.mjs).
  prefixJob(
    'prefix-mha-8k',
    { B: 4, Lp: 8192, own: 64, H: 16, Hkv: 16, Dh: 64, dtype: 'float32' },
    { copies: 2.5, one: 1.6 },
  ),
  prefixJob(
    'prefix-mha-8k-f16',
    { B: 4, Lp: 8192, own: 64, H: 16, Hkv: 16, Dh: 64, dtype: 'float16' },
    { copies: 2.5, one: 1.6 },
  ),
  {
    name: 'beam-reorder',
    group: 'serving',
    kind: 'reorder',
    prefix: { B: 4, Lp: 8192, own: 64, H: 16, Hkv: 16, Dh: 64, dtype: 'float32' },
    contestants: [REORDER_STEP, REORDER],
    ratios: [speed(REORDER, REORDER_STEP, '<= 0.05x the time of the step', { speed: false, atMost: 0.05 })],
  },
  {
    name: 'ring-1k',
    group: 'serving',
    kind: 'ring',
    contestants: [RING_CACHE, RING_PLAIN],
    ratios: [speed(RING_CACHE, RING_PLAIN, '<= 1.1x the time of the plain cache', { speed: false, atMost: 1.1 })],
  },
  {
    name: 'samples-tiny-llama',
    group: 'serving',
    kind: 'samples',
    contestants: [SAMPLES_SHARED, SAMPLES_SEPARATE],
    ratios: [speed(SAMPLES_SHARED, SAMPLES_SEPARATE, '— (tokens/s of the batch against separate runs)')],
  },
  prefixJob('prefix-gqa-4k', { B: 4, Lp: 4096, own: 64, H: 32, Hkv: 8, Dh: 128, dtype: 'float32' }, { copies: 1.8 }),
  {
    // A call takes about a second, so the budget alone gives the 5 rounds of the minimum, whose median
    // moved by 0.9-1.1 between runs of identical code (its 5% margin is inside that): 11 rounds.
    name: 'prefill-cache',
    group: 'decode',
    kind: 'prefill',
    shape: 'gqa2k',
    minRounds: 11,
    contestants: ['cache prefill', 'stateless causal'],
    ratios: [speed('cache prefill', 'stateless causal', '>= 0.95x the stateless causal call', { atLeast: 0.95 })],
  },
];

export const JOB_NAMES = JOBS.map((j) => j.name);
export const GROUPS = ['v1', 'options', 'pairs', 'decode', 'serving'];

export function jobByName(name) {
  const j = JOBS.find((x) => x.name === name);
  if (!j) throw new Error(`unknown job "${name}" (expected one of ${JOB_NAMES.join(', ')})`);
  return j;
}

export const decodeShapeByName = (name) => DECODE_SHAPES.find((s) => s.name === name);

/** True when a ratio meets its bound, undefined when it has none. */
export function meets(ratio) {
  if (ratio.atLeast !== undefined) return ratio.median >= ratio.atLeast;
  if (ratio.atMost !== undefined) return ratio.median <= ratio.atMost;
  return undefined;
}
