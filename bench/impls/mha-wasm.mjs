// mha-wasm through its public API (dist/index.js, built by scripts/build.sh). `threads` > 1 selects the
// simd-threads build; the row fails if the environment cannot give that many threads.
export async function create(shape, { distUrl = new URL('../../dist/index.js', import.meta.url).href, threads = 1 } = {}) {
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
