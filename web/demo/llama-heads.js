// tiny-llama's attention weights for the heads view, computed in the model Worker: the Llama session keeps no
// K rows of its own, so the keys are the ones its caches hold (cache.read(): rotated, as stored, decoded
// exactly) and the queries are the ones the session reports before attending (LlamaSession.onProjections), turned
// by the session's own RoPE tables to their positions. mha.attentionWeights over those is the softmax the
// cache computed, up to the reference's float64 rounding.
//
// Shapes: H heads, Hkv KV heads, Dh head size, n query rows of the last forward call, T keys held.

/** A float16 cache's read() gives the binary16 bits; the others float32. */
function bitsToFloat32(x) {
  if (!(x instanceof Uint16Array)) return x;
  return Float32Array.from(x, (bits) => {
    const exponent = (bits >> 10) & 0x1f;
    const fraction = bits & 0x3ff;
    const sign = bits & 0x8000 ? -1 : 1;
    if (exponent === 0) return sign * fraction * 2 ** -24;
    if (exponent === 31) return fraction ? NaN : sign * Infinity;
    return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
  });
}

/** Rows q (n, H·Dh) rotated at positions first .. first + n − 1: Llama's rotate_half pairs (r, r + Dh/2). */
function rotateRows(q, n, H, Dh, first, { cos, sin }) {
  const half = Dh / 2;
  const out = new Float32Array(q.length);
  for (let i = 0; i < n; i++) {
    const table = (first + i) * half;
    for (let h = 0; h < H; h++) {
      const at = (i * H + h) * Dh;
      for (let r = 0; r < half; r++) {
        const c = cos[table + r];
        const s = sin[table + r];
        const a = q[at + r];
        const b = q[at + r + half];
        out[at + r] = a * c - b * s;
        out[at + r + half] = b * c + a * s;
      }
    }
  }
  return out;
}

/** Starts keeping, per layer, the queries of the session's latest forward call; returns the session. */
export function watchQueries(session) {
  const queries = [];
  session.onProjections = (layer, q) => {
    queries[layer] = q;
  };
  session.latestQueries = queries;
  return session;
}

/**
 * Per layer, { weights: (H, n, T) }: the attention of the latest forward call's n queries (at positions
 * T − n .. T − 1) over the T keys the layer's cache holds; the shape of tiny-gpt's session.attentionWeights.
 */
export function llamaWeights(mha, session, { H, Hkv, Dh }) {
  return session.caches.map((cache, layer) => {
    const q = session.latestQueries[layer];
    const n = q.length / (H * Dh);
    const k = bitsToFloat32(cache.read().k);
    const T = k.length / (Hkv * Dh);
    const rotated = rotateRows(q, n, H, Dh, T - n, session.rope);
    const dims = { batch: 1, seqLen: n, kvSeqLen: T, dModel: H * Dh, numHeads: H, numKvHeads: Hkv };
    return { weights: mha.attentionWeights(rotated, k, { ...dims, queryOffset: T - n, causal: true }) };
  });
}
