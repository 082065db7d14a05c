// mha-wasm through its public API (dist/index.js, built by scripts/build.sh).
export async function create(shape, { distUrl = new URL('../../dist/index.js', import.meta.url).href } = {}) {
  const { createMHA } = await import(distUrl);
  const mha = await createMHA();
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
