// mha-wasm through its public API (dist/index.js, built by scripts/build.sh). `threads` > 1 selects a
// threaded build; the row fails if the environment cannot give that many threads. `simd` is createMHA's
// option ('fixed': the SIMD128 builds even where Relaxed SIMD is available); `build`: the build the row
// must run (e.g. 'relaxed-simd'), else it fails saying what was loaded instead; `wasmBinary`: createMHA's
// option (a given .wasm file: bench/lib/perf-call.mjs).
//
// `heapTensors`: q, k and v are copied onto the wasm heap once, at load time (mha.allocate + set, outside
// the timing, as ORT builds its session there), and every timed call passes those tensors and an output
// tensor, so it copies nothing into or out of the heap. The default passes Float32Arrays, whose copies
// each call pays, like every peer.
export async function create(
  shape,
  {
    distUrl = new URL('../../dist/index.js', import.meta.url).href,
    threads = 1,
    heapTensors = false,
    inputs,
    simd,
    build,
    wasmBinary,
  } = {},
) {
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({
    threads,
    ...(simd === undefined ? {} : { simd }),
    ...(wasmBinary === undefined ? {} : { wasmBinary }),
  });
  if (mha.info.threads !== threads)
    throw new Error(`asked for ${threads} threads, got ${mha.info.threads} (${mha.info.build})`);
  if (build !== undefined && mha.info.build !== build) {
    const hint = build.startsWith('relaxed')
      ? ' (this engine lacks WebAssembly Relaxed SIMD; Node: --experimental-wasm-relaxed-simd)'
      : '';
    mha.dispose();
    throw new Error(`asked for the ${build} build, got ${mha.info.build}${hint}`);
  }
  const options = {
    batch: shape.B,
    seqLen: shape.S,
    kvSeqLen: shape.T,
    dModel: shape.D,
    numHeads: shape.H,
    causal: !!shape.causal,
    ...modelOptions(shape),
  };
  const info = { ...mha.info, mask: shape.causal ? 'causal: true' : 'none' };
  if (!heapTensors) {
    return {
      info,
      run(q, k, v) {
        return mha.multiHeadAttention(q, k, v, options);
      },
      dispose() {
        mha.dispose();
      },
    };
  }
  if (!inputs) throw new Error('heapTensors: the measurement must pass the inputs to load()');
  const [tq, tk, tv] = [inputs.q, inputs.k, inputs.v].map((array) => {
    const tensor = mha.allocate(array.length);
    tensor.set(array);
    return tensor;
  });
  const withOut = { ...options, out: mha.allocate(inputs.q.length) };
  return {
    info: { ...info, inputs: 'heap tensors, copied in at load; out a heap tensor' },
    run(q, k, v) {
      // The tensors hold the inputs given at load: a call about other inputs would time the wrong thing.
      if (q !== inputs.q || k !== inputs.k || v !== inputs.v)
        throw new Error('heapTensors: run() got other inputs than load()');
      return mha.multiHeadAttention(tq, tk, tv, withOut); // out's data: a view of the heap
    },
    dispose() {
      mha.dispose(); // frees the tensors too
    },
  };
}

/** The options of docs/spec.md Parts 2 and 4 that a bench shape sets, by their API names (rope: its tables). */
function modelOptions(shape) {
  const o = {};
  if (shape.Dv !== undefined) o.vHeadDim = shape.Dv;
  if (shape.dtype) o.dtype = shape.dtype;
  if (shape.sinks) o.sinks = shape.sinks;
  if (shape.rope) o.rope = { cos: shape.rope.cos, sin: shape.rope.sin, rotaryDim: shape.rope.rotaryDim };
  if (shape.Hkv !== undefined) o.numKvHeads = shape.Hkv;
  if (shape.window) o.window = shape.window;
  if (shape.softcap !== undefined) o.softcap = shape.softcap;
  if (shape.alibiSlopes) o.alibiSlopes = shape.alibiSlopes;
  if (shape.bias) Object.assign(o, { bias: shape.bias, biasShape: shape.biasShape });
  return o;
}
