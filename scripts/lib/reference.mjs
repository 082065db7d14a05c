// The one float64 reference of the project's JS tests and bench: docs/spec.md (Parts 1 and 2) in plain
// loops, Float32Array storage, float64 (JS number) accumulation. It is the bench's "plain-js"
// implementation being timed, the reference every bench row is checked against, and (through
// tests/js/helpers.mjs) the independent reference of the JS tests. Isomorphic: no imports.
//
// A shape uses the bench's letters: { B, S, T, D, H, causal, scale } and, all optional, the options of
// docs/spec.md Parts 2 and 4 by their API names: Hkv (numKvHeads), Dv (vHeadDim), queryOffset, kvLengths,
// window, softcap, alibiSlopes, bias + biasShape, emptyRows, sinks, rope ({ cos, sin, rotaryDim,
// interleaved }); and mask (B,S,T), truthy = may attend.

/**
 * Computes output rows `rows` (global query-row indices r = b*S + i) of attention for every head h,
 * writing them to `out`: per head, softmax over the visible keys of the scores
 *   s = scale·(q_h[i]·k_g[j]) → softcap → − slope[h]·|p_i − j| → + bias[b', h', i, j],   g = floor(h / (H/Hkv)),
 * times v_g, with sinks[h] one more logit of the softmax's denominator and q, k rotated by position with
 * rope. q (B,S,D), k (B,T,Hkv·Dh), v (B,T,Hkv·Dv); `out` is either the full (B,S,H·Dv) output
 * (compact=false) or a (rows.length, H·Dv) array (compact=true). `extras.lse` (B,H,S) and `extras.weights` (B,H,S,T), when
 * given, receive the log-sum-exp and the softmax weights of those rows.
 */
export function attentionRows(q, k, v, shape, rows, out, compact = false, extras = {}) {
  const { B, S, T, D, H, causal = false, mask, kvLengths, softcap, alibiSlopes, bias, sinks, rope } = shape;
  const Hkv = shape.Hkv ?? H;
  const Dh = D / H;
  const Dv = shape.Dv ?? Dh;
  const kvD = Hkv * Dh;
  const vD = Hkv * Dv;
  const outD = H * Dv;
  const headsPerKv = H / Hkv;
  const scale = shape.scale ?? Math.fround(1 / Math.sqrt(Dh));
  const queryOffset = shape.queryOffset ?? 0;
  const [left, right] = shape.window ?? [Infinity, Infinity];
  const [biasB, biasH] = shape.biasShape ?? [B, H];
  const emptyValue = shape.emptyRows === 'zero' ? 0 : NaN;
  const { lse, weights } = extras;
  const scores = new Float64Array(T);
  const hidden = new Uint8Array(T);
  const acc = new Float64Array(Dv);
  const rotatedQ = new Float64Array(Dh);
  for (let n = 0; n < rows.length; n++) {
    const r = rows[n];
    const b = Math.floor(r / S);
    const i = r - b * S;
    if (b >= B) throw new RangeError(`row ${r} out of range`);
    // Visibility by position and length (spec 2.3): only keys jStart <= j < jEnd can be visible; the mask
    // and −Infinity scores hide more.
    const position = queryOffset + i;
    const jStart = Math.max(0, position - left);
    const jEnd = Math.min(T, kvLengths ? kvLengths[b] : T, causal ? position + 1 : T, position + right + 1);
    const maskRow = (b * S + i) * T;
    const qRow = r * D;
    const kvBase = b * T * kvD;
    const vBase = b * T * vD;
    const outRow = (compact ? n : r) * outD;
    for (let h = 0; h < H; h++) {
      const qOff = qRow + h * Dh;
      const kvHead = Math.floor(h / headsPerKv) * Dh;
      const vHead = Math.floor(h / headsPerKv) * Dv;
      if (rope) rotate(q, qOff, position, rope, Dh, rotatedQ);
      const slope = alibiSlopes ? alibiSlopes[h] : 0;
      const biasRow = bias ? (((biasB === 1 ? 0 : b) * biasH + (biasH === 1 ? 0 : h)) * S + i) * T : 0;
      let max = -Infinity;
      let nanScore = false;
      for (let j = jStart; j < jEnd; j++) {
        hidden[j] = 1;
        if (mask && !mask[maskRow + j]) continue;
        const kOff = kvBase + j * kvD + kvHead;
        let dot = 0;
        if (rope) dot = rotatedDot(rotatedQ, k, kOff, j, rope, Dh);
        else for (let d = 0; d < Dh; d++) dot += q[qOff + d] * k[kOff + d];
        let s = dot * scale;
        if (softcap !== undefined) s = softcap * Math.tanh(s / softcap);
        if (alibiSlopes) s -= slope * Math.abs(position - j);
        if (bias) s += bias[biasRow + j];
        if (s === -Infinity) continue; // hides the key, as the mask does
        hidden[j] = 0;
        scores[j] = s;
        if (s > max) max = s;
        else if (s !== s) nanScore = true;
      }
      const lseAt = (b * H + h) * S + i;
      const sink = sinks ? sinks[h] : -Infinity;
      // An empty row (no visible key) gives emptyValue (0 with a sink, which takes the whole mass); a NaN
      // score makes the whole row NaN.
      if (max === -Infinity || nanScore) {
        const value = nanScore ? NaN : sinks ? 0 : emptyValue;
        out.fill(value, outRow + h * Dv, outRow + (h + 1) * Dv);
        if (lse) lse[lseAt] = nanScore ? NaN : sink;
        if (weights) weights.fill(value, lseAt * T, (lseAt + 1) * T);
        continue;
      }
      if (sink > max) max = sink;
      let sum = sinks ? Math.exp(sink - max) : 0;
      for (let j = jStart; j < jEnd; j++) {
        if (hidden[j]) continue;
        const e = Math.exp(scores[j] - max);
        scores[j] = e;
        sum += e;
      }
      acc.fill(0);
      for (let j = jStart; j < jEnd; j++) {
        if (hidden[j]) continue; // hidden keys are never read, as in the C++ reference
        const p = scores[j];
        const vOff = vBase + j * vD + vHead;
        for (let d = 0; d < Dv; d++) acc[d] += p * v[vOff + d];
      }
      const inv = 1 / sum;
      for (let d = 0; d < Dv; d++) out[outRow + h * Dv + d] = acc[d] * inv;
      if (lse) lse[lseAt] = max + Math.log(sum);
      if (weights) {
        const wRow = lseAt * T;
        weights.fill(0, wRow, wRow + T);
        for (let j = jStart; j < jEnd; j++) if (!hidden[j]) weights[wRow + j] = scores[j] * inv;
      }
    }
  }
  return out;
}

/** Entry d of x[at..] rotated at `position` by rope's tables (docs/spec.md 4.5). */
function rotated(x, at, d, position, rope) {
  const { cos, sin, rotaryDim, interleaved = false } = rope;
  if (d >= rotaryDim) return x[at + d];
  const half = rotaryDim / 2;
  const r = interleaved ? d >> 1 : d % half;
  const c = cos[position * half + r],
    s = sin[position * half + r];
  if (interleaved) return d % 2 === 0 ? x[at + d] * c - x[at + d + 1] * s : x[at + d] * c + x[at + d - 1] * s;
  return d < half ? x[at + d] * c - x[at + d + half] * s : x[at + d] * c + x[at + d - half] * s;
}

function rotate(x, at, position, rope, Dh, into) {
  for (let d = 0; d < Dh; d++) into[d] = rotated(x, at, d, position, rope);
}

/** rotatedQ · (k row at kOff rotated at position j). */
function rotatedDot(rotatedQ, k, kOff, j, rope, Dh) {
  let dot = 0;
  for (let d = 0; d < Dh; d++) dot += rotatedQ[d] * rotated(k, kOff, d, j, rope);
  return dot;
}

/** Full attention, (B,S,H·Dv) output; `extras` as attentionRows. */
export function attention(
  q,
  k,
  v,
  shape,
  out = new Float32Array(shape.B * shape.S * shape.H * (shape.Dv ?? shape.D / shape.H)),
  extras = {},
) {
  const rows = new Int32Array(shape.B * shape.S);
  for (let r = 0; r < rows.length; r++) rows[r] = r;
  return attentionRows(q, k, v, shape, rows, out, false, extras);
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
