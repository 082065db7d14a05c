// Implementation registry: name -> lazy loader, so each child process loads only what it runs, and
// `supports(shape)` for peers that lack an option of docs/spec.md Part 2 (their row is then skipped, with
// the reason, instead of timing another computation).
// 'mha-wasm' is createMHA's own choice (relaxed-simd where the engine has Relaxed SIMD: the browsers, Node
// with --experimental-wasm-relaxed-simd); -relaxed and -fixed force one side of it (`relaxedSimd`: the
// row needs the feature, so Node runs it only with the flag).
import { hasOptions } from '../lib/shapes.mjs';

const v1Only = (s) => (hasOptions(s) ? 'has no such option (docs/spec.md Part 2)' : true);
// GroupQueryAttention: causal prefill with S = T; windows [left, 0] and softcap are attributes; no bias or ALiBi.
const gqaOp = (s) =>
  !s.causal || s.S !== s.T
    ? 'is causal with S = T only'
    : s.biasShape || s.alibiSlopes
      ? 'takes no bias or ALiBi'
      : s.window && s.window[1] !== 0
        ? 'has left windows only'
        : true;

export const IMPLS = {
  'mha-wasm': { label: 'mha-wasm', load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, opts) },
  'mha-wasm-relaxed': {
    label: 'mha-wasm relaxed-simd',
    relaxedSimd: true,
    load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, build: 'relaxed-simd' }),
  },
  'mha-wasm-fixed': {
    label: "mha-wasm simd: 'fixed'",
    load: async (shape, opts) =>
      (await import('./mha-wasm.mjs')).create(shape, { ...opts, simd: 'fixed', build: 'simd' }),
  },
  'mha-wasm-2t': {
    label: 'mha-wasm 2 threads',
    load: async (shape, opts) => (await import('./mha-wasm-threads.mjs')).create(shape, { ...opts, threads: 2 }),
  },
  'mha-wasm-heap': {
    label: 'mha-wasm heap tensors',
    load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, heapTensors: true }),
  },
  'mha-wasm-heap-2t': {
    label: 'mha-wasm heap tensors 2 threads',
    load: async (shape, opts) =>
      (await import('./mha-wasm.mjs')).create(shape, { ...opts, heapTensors: true, threads: 2 }),
  },
  'plain-js': { label: 'plain JS', load: async (shape, opts) => (await import('./plain-js.mjs')).create(shape, opts) },
  'ort-std': {
    label: 'ORT std ops',
    load: async (shape, opts) => (await import('./ort.mjs')).createStd(shape, opts),
    supports: v1Only,
  },
  'ort-mha': {
    label: 'ORT contrib MHA',
    load: async (shape) => (await import('./ort.mjs')).createContrib(shape),
    supports: v1Only,
  },
  // singleCallOverMs: its gqa2k call took 59 s on the busy host; a first call this slow is its only sample.
  'ort-gqa': {
    label: 'ORT contrib GQA',
    load: async (shape) => (await import('./ort.mjs')).createGqa(shape),
    supports: gqaOp,
    singleCallOverMs: 2000,
  },
  'tfjs-wasm': {
    label: 'tfjs wasm',
    load: async (shape) => (await import('./tfjs.mjs')).create(shape),
    supports: v1Only,
  },
};

export const IMPL_NAMES = Object.keys(IMPLS);

/** true, or why `impl` cannot run `shape`. */
export function supports(impl, shape) {
  const own = IMPLS[impl].supports?.(shape) ?? true;
  if (own !== true) return own; // the more telling reason first
  if (shape.only && shape.only.length === 0) return `is timed only in its pair job (bench/lib/jobs.mjs)`;
  if (shape.only && !shape.only.includes(impl))
    return `is not run on ${shape.name} (the shape lists ${shape.only.join(', ')})`;
  return true;
}
