// Implementation registry: name -> lazy loader, so each child process loads only what it runs.
// 'mha-wasm' is createMHA's own choice (relaxed-simd where the engine has Relaxed SIMD: the browsers, Node
// with --experimental-wasm-relaxed-simd); -relaxed and -fixed force one side of it (`relaxedSimd`: the
// row needs the feature, so Node runs it only with the flag).
export const IMPLS = {
  'mha-wasm': { label: 'mha-wasm', load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, opts) },
  'mha-wasm-relaxed': { label: 'mha-wasm relaxed-simd', relaxedSimd: true, load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, build: 'relaxed-simd' }) },
  'mha-wasm-fixed': { label: "mha-wasm simd: 'fixed'", load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, simd: 'fixed', build: 'simd' }) },
  'mha-wasm-2t': { label: 'mha-wasm 2 threads', load: async (shape, opts) => (await import('./mha-wasm-threads.mjs')).create(shape, { ...opts, threads: 2 }) },
  'mha-wasm-heap': { label: 'mha-wasm heap tensors', load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, heapTensors: true }) },
  'mha-wasm-heap-2t': { label: 'mha-wasm heap tensors 2 threads', load: async (shape, opts) => (await import('./mha-wasm.mjs')).create(shape, { ...opts, heapTensors: true, threads: 2 }) },
  'plain-js': { label: 'plain JS', load: async (shape, opts) => (await import('./plain-js.mjs')).create(shape, opts) },
  'ort-std': { label: 'ORT std ops', load: async (shape, opts) => (await import('./ort.mjs')).createStd(shape, opts) },
  'ort-mha': { label: 'ORT contrib MHA', load: async (shape) => (await import('./ort.mjs')).createContrib(shape) },
  'tfjs-wasm': { label: 'tfjs wasm', load: async (shape) => (await import('./tfjs.mjs')).create(shape) },
};

export const IMPL_NAMES = Object.keys(IMPLS);
