// Benchmark shapes. B batch, S query rows, T key/value rows, D model size, H heads (Dh = D / H), and the
// options of docs/spec.md Part 2 by their reference names (scripts/lib/reference.mjs): Hkv, window, softcap,
// alibiSlopes, biasShape (the bias itself is drawn with the inputs, scripts/lib/prng.mjs).

/** ALiBi slopes of the paper (Press et al.) for H heads, a power of two: 2^(-8(h+1)/H). */
export function alibiSlopes(H) {
  return Array.from({ length: H }, (_, h) => Math.fround(2 ** ((-8 * (h + 1)) / H)));
}

/** The mha-wasm rows the option shapes run (Float32Arrays; 1 and 2 threads; relaxed and fixed SIMD where they differ). */
const MHA_ROWS = ['mha-wasm', 'mha-wasm-relaxed', 'mha-wasm-fixed', 'mha-wasm-2t'];

export const SHAPES = [
  { name: 'seed', B: 2, S: 5, T: 5, D: 12, H: 3, causal: false },
  { name: 'bert', B: 1, S: 128, T: 128, D: 768, H: 12, causal: false },
  { name: 'bert-b8', B: 8, S: 128, T: 128, D: 768, H: 12, causal: false },
  { name: 'causal512', B: 1, S: 512, T: 512, D: 512, H: 8, causal: true },
  { name: 'cross', B: 4, S: 64, T: 1024, D: 512, H: 8, causal: false },
  { name: 'long2k', B: 1, S: 2048, T: 2048, D: 768, H: 12, causal: false },
  { name: 'long8k', B: 1, S: 8192, T: 8192, D: 512, H: 8, causal: false },
  // Options for real models (issue #13), each beside the call it is compared with
  // (the pair jobs of bench/lib/jobs.mjs time both in one process, interleaved).
  // These rows skip the heap-tensor modes and TF.js, to keep the full run within ~20 minutes; the 8k pair
  // runs no ORT either (its long8k rows take minutes and GBs). gqa2k-mha keeps ORT's std and MHA graphs:
  // with Hkv = H they are the std-ops graph that repeats the KV heads, gqa2k's other ORT peer. ORT's
  // GroupQueryAttention runs gqa2k only (one call, about a minute on a busy host).
  {
    name: 'gqa2k',
    group: 'options',
    B: 1,
    S: 2048,
    T: 2048,
    D: 2048,
    H: 32,
    Hkv: 8,
    causal: true,
    only: [...MHA_ROWS, 'plain-js', 'ort-gqa'],
  },
  {
    name: 'gqa2k-mha',
    group: 'options',
    B: 1,
    S: 2048,
    T: 2048,
    D: 2048,
    H: 32,
    Hkv: 32,
    causal: true,
    only: [...MHA_ROWS, 'plain-js', 'ort-std', 'ort-mha'],
  },
  {
    name: 'window8k',
    group: 'options',
    B: 1,
    S: 8192,
    T: 8192,
    D: 512,
    H: 8,
    causal: true,
    window: [511, 0],
    only: [...MHA_ROWS, 'plain-js'],
  },
  {
    name: 'causal8k',
    group: 'options',
    B: 1,
    S: 8192,
    T: 8192,
    D: 512,
    H: 8,
    causal: true,
    only: [...MHA_ROWS, 'plain-js'],
  },
  {
    name: 'bert-bias',
    group: 'options',
    B: 1,
    S: 128,
    T: 128,
    D: 768,
    H: 12,
    causal: false,
    biasShape: [1, 12, 128, 128],
    only: [...MHA_ROWS, 'plain-js'],
  },
  {
    name: 'bert-alibi',
    group: 'options',
    B: 1,
    S: 128,
    T: 128,
    D: 768,
    H: 12,
    causal: false,
    alibiSlopes: alibiSlopes(12),
    only: [...MHA_ROWS, 'plain-js'],
  },
  {
    name: 'bert-softcap',
    group: 'options',
    B: 1,
    S: 128,
    T: 128,
    D: 768,
    H: 12,
    causal: false,
    softcap: 30,
    only: [...MHA_ROWS, 'plain-js'],
  },
  // The standard definitions (issue #30, docs/spec.md Part 4), each timed only in its pair job against the
  // call it is compared with (`only: []`: no row of its own). `rope` names its tables' parameters; the
  // jobs build the tables with mha-wasm's ropeTables. mla-prefill: DeepSeek-style Dh 192, Dv 128.
  {
    name: 'mla-prefill',
    group: 'options',
    B: 1,
    S: 1024,
    T: 1024,
    D: 16 * 192,
    H: 16,
    Dv: 128,
    causal: true,
    only: [],
  },
  {
    name: 'mla-prefill-padded',
    group: 'options',
    B: 1,
    S: 1024,
    T: 1024,
    D: 16 * 192,
    H: 16,
    Dv: 192,
    causal: true,
    only: [],
  },
  {
    name: 'bert-f16',
    group: 'options',
    B: 1,
    S: 128,
    T: 128,
    D: 768,
    H: 12,
    causal: false,
    dtype: 'float16',
    only: [],
  },
  {
    name: 'bert-sinks',
    group: 'options',
    B: 1,
    S: 128,
    T: 128,
    D: 768,
    H: 12,
    causal: false,
    sinks: sinkLogits(12),
    only: [],
  },
  {
    name: 'llama-rope',
    group: 'options',
    B: 1,
    S: 2048,
    T: 2048,
    D: 2048,
    H: 32,
    Hkv: 8,
    causal: true,
    rope: { rotaryDim: 64, theta: 500000 },
    only: [],
  },
];

/** gpt-oss-like sink logits for H heads: fixed, within a few units of typical scores. */
export function sinkLogits(H) {
  return Array.from({ length: H }, (_, h) => Math.fround(1.5 * Math.sin(h + 1)));
}

/** The v1 shapes (`--group v1`); the others, issue #13's, are `group: 'options'`, their comparison calls included. */
export const V1_SHAPES = SHAPES.filter((s) => s.group === undefined).map((s) => s.name);

/** True when a shape uses an option of Part 2 (peers without that option skip it). */
export function hasOptions(s) {
  return (
    (s.Hkv !== undefined && s.Hkv !== s.H) ||
    !!s.window ||
    s.softcap !== undefined ||
    !!s.alibiSlopes ||
    !!s.biasShape ||
    s.Dv !== undefined ||
    !!s.dtype ||
    !!s.sinks ||
    !!s.rope
  );
}

export function shapeByName(name) {
  const s = SHAPES.find((x) => x.name === name);
  if (!s) throw new Error(`unknown shape "${name}" (expected one of ${SHAPES.map((x) => x.name).join(', ')})`);
  return s;
}

/** FLOPs per call: 2*B*H*S*T*(Dh + Dv) (QK^T and PV, 2 FLOPs per multiply-add each), masked positions included. */
export function flopsOf(shape) {
  const Dh = shape.D / shape.H;
  return 2 * shape.B * shape.H * shape.S * shape.T * (Dh + (shape.Dv ?? Dh));
}

export function describeShape(s) {
  const options = [
    s.Hkv !== undefined && s.Hkv !== s.H ? `Hkv ${s.Hkv}` : '',
    s.causal ? 'causal' : '',
    s.window ? `window [${s.window.join(', ')}]` : '',
    s.biasShape ? `bias [${s.biasShape.join(',')}]` : '',
    s.alibiSlopes ? 'ALiBi' : '',
    s.softcap !== undefined ? `softcap ${s.softcap}` : '',
    s.Dv !== undefined ? `Dv ${s.Dv}` : '',
    s.dtype ? s.dtype : '',
    s.sinks ? 'sinks' : '',
    s.rope ? `rope ${s.rope.rotaryDim}` : '',
  ].filter(Boolean);
  return `(${s.B},${s.S},${s.T},${s.D},${s.H}${options.length ? `,${options.join(',')}` : ''})`;
}
