// Plain-JS multi-head attention: straightforward loops, Float32Array storage, float64 (JS number)
// accumulation. Used both as the "plain-js" implementation being timed and as the reference every
// other implementation is checked against. Isomorphic: no imports.

/**
 * Computes output rows `rows` (global query-row indices r = b*S + i) of
 * softmax(q_h k_h^T * scale [+ causal mask]) v_h for every head h, writing them to `out`.
 * `out` is either the full (B,S,D) output (compact=false) or a (rows.length, D) array (compact=true).
 */
export function attentionRows(q, k, v, shape, rows, out, compact = false) {
  const { B, S, T, D, H, causal } = shape;
  const Dh = D / H;
  const scale = shape.scale ?? Math.fround(1 / Math.sqrt(Dh));
  const scores = new Float64Array(T);
  const acc = new Float64Array(Dh);
  for (let n = 0; n < rows.length; n++) {
    const r = rows[n];
    const b = Math.floor(r / S);
    const i = r - b * S;
    if (b >= B) throw new RangeError(`row ${r} out of range`);
    const qRow = r * D;
    const kvBase = b * T * D;
    const outRow = (compact ? n : r) * D;
    for (let h = 0; h < H; h++) {
      const qOff = qRow + h * Dh;
      let max = -Infinity;
      for (let j = 0; j < T; j++) {
        if (causal && j > i) {
          scores[j] = -Infinity;
          continue;
        }
        const kOff = kvBase + j * D + h * Dh;
        let dot = 0;
        for (let d = 0; d < Dh; d++) dot += q[qOff + d] * k[kOff + d];
        const s = dot * scale;
        scores[j] = s;
        if (s > max) max = s;
      }
      let sum = 0;
      for (let j = 0; j < T; j++) {
        const e = scores[j] === -Infinity ? 0 : Math.exp(scores[j] - max);
        scores[j] = e;
        sum += e;
      }
      acc.fill(0);
      for (let j = 0; j < T; j++) {
        const p = scores[j];
        if (p === 0) continue;
        const vOff = kvBase + j * D + h * Dh;
        for (let d = 0; d < Dh; d++) acc[d] += p * v[vOff + d];
      }
      const inv = 1 / sum; // a row with no visible key gives NaN (0 * Infinity), as PyTorch does
      for (let d = 0; d < Dh; d++) out[outRow + h * Dh + d] = acc[d] * inv;
    }
  }
  return out;
}

/** Full plain-JS attention, (B,S,D) output. */
export function attention(q, k, v, shape, out = new Float32Array(shape.B * shape.S * shape.D)) {
  const rows = new Int32Array(shape.B * shape.S);
  for (let r = 0; r < rows.length; r++) rows[r] = r;
  return attentionRows(q, k, v, shape, rows, out, false);
}

/** `count` global query rows spread evenly over [0, B*S), always including the first and last. */
export function sampleRows(shape, count) {
  const total = shape.B * shape.S;
  if (count >= total) return Int32Array.from({ length: total }, (_, r) => r);
  const rows = new Set();
  for (let n = 0; n < count; n++) rows.add(Math.round((n * (total - 1)) / (count - 1)));
  return Int32Array.from([...rows].sort((a, b) => a - b));
}

/**
 * Compares `rows` of a full (B,S,D) output against a compact float64 reference of those rows.
 * Passes when |got - want| <= atol + rtol*|want| everywhere (and NaN only where want is NaN).
 */
export function compareRows(got, want, rows, D, atol = 2e-3, rtol = 2e-3) {
  let maxAbs = 0;
  let worst = null;
  let bad = 0;
  for (let n = 0; n < rows.length; n++) {
    for (let c = 0; c < D; c++) {
      const g = got[rows[n] * D + c];
      const w = want[n * D + c];
      if (Number.isNaN(w) && Number.isNaN(g)) continue;
      const err = Math.abs(g - w);
      if (!(err <= atol + rtol * Math.abs(w))) {
        bad++;
        if (!worst) worst = { row: rows[n], col: c, got: g, want: w };
      }
      if (err > maxAbs || Number.isNaN(err)) maxAbs = Number.isNaN(err) ? Infinity : Math.max(maxAbs, err);
    }
  }
  return { ok: bad === 0, maxAbsErr: maxAbs, badCount: bad, checked: rows.length * D, worst };
}
