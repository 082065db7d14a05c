// mha-wasm with its threaded build (createMHA({ threads: 2 })): the simd-threads module, a pool of Node
// worker threads on shared memory. The row is comparable with 'mha-wasm' (1 thread) of the same run.
export async function create(shape, { distUrl = new URL('../../dist/index.js', import.meta.url).href, threads = 2 } = {}) {
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads });
  if (mha.info.threads !== threads) throw new Error(`asked for ${threads} threads, got ${mha.info.threads} (${mha.info.build})`);
  const options = { batch: shape.B, seqLen: shape.S, kvSeqLen: shape.T, dModel: shape.D, numHeads: shape.H, causal: !!shape.causal };
  return {
    info: { ...mha.info, mask: shape.causal ? 'causal: true' : 'none' },
    run(q, k, v) {
      return mha.multiHeadAttention(q, k, v, options);
    },
    dispose() {
      mha.dispose();
    },
  };
}
