// The stage view: the traced token's row in one head after each step of the score pipeline (mha.attentionWeights
// with `stage`), and the RoPE chart: the score of two equal tokens as their distance grows. Both come from the
// library's own calls, so they show what the kernel computes rather than a re-derivation.
import { $, el, prepareCanvas } from './dom.js';
import { rampColor } from './colors.js';

const STAGES = [
  ['scaled', 'q·k·scale, for every key, hidden or not'],
  ['softcapped', 'c·tanh(s/c); the same without a softcap'],
  ['biased', 'minus ALiBi; −∞ where a key is hidden'],
  ['softmax', 'the weights'],
];

const fmtScore = (x) => (x === -Infinity ? '−∞' : Number.isNaN(x) ? 'NaN' : x.toFixed(2));
const fmtProb = (x) => (Number.isNaN(x) ? 'NaN' : x === 0 ? '0' : x.toFixed(3));

/** Keeps the head picker to H heads, holding on to the head chosen while it exists. */
export function syncStageHeads(numHeads) {
  const select = $('stageHead');
  const previous = Number(select.value);
  select.replaceChildren(
    ...Array.from({ length: numHeads }, (_, h) => el('option', { value: String(h) }, `head ${h}`)),
  );
  select.value = String(Number.isInteger(previous) && previous < numHeads ? previous : 0);
}

/**
 * Draws the stage table for query row `token` of head `head`: q (1, S, D), k (1, T, Hkv·Dh), `options` the
 * attentionWeights options of the maps (dims and the panel's options).
 */
export function renderStages(mha, { q, k, options, token, head, labels }) {
  const { seqLen: S, numHeads: H } = options;
  const T = options.kvSeqLen ?? S;
  const rows = STAGES.map(([stage, label]) => {
    const all = mha.attentionWeights(q, k, { ...options, stage });
    const at = (head * S + token) * T;
    return { stage, label, values: all.subarray(at, at + T) };
  });
  const softmax = rows[3].values;
  let total = 0;
  for (const w of softmax) total += w;
  const sinkMass = options.sinks && !Number.isNaN(total) ? Math.max(0, 1 - total) : null;

  // One row per key and a column per stage: narrow enough for a phone, and each row reads left to right.
  const header = el(
    'tr',
    {},
    el('th', { scope: 'col' }, 'key'),
    ...rows.map(({ stage, label }) => el('th', { scope: 'col', 'data-stage': stage, title: label }, stage)),
  );
  const cellOf = (stage, x) => {
    const cell = el('td', { 'data-stage': stage }, stage === 'softmax' ? fmtProb(x) : fmtScore(x));
    if (x === -Infinity) cell.className = 'hidden-key';
    if (stage === 'softmax' && Number.isFinite(x)) {
      cell.style.background = rampColor(x);
      if (x > 0.5) cell.style.color = '#fff';
    }
    return cell;
  };
  const body = labels.map((word, j) =>
    el(
      'tr',
      { 'data-key': String(j) },
      el('th', { scope: 'row' }, `${j} ${word}`),
      ...rows.map(({ stage, values }) => cellOf(stage, values[j])),
    ),
  );
  if (sinkMass !== null) {
    body.push(
      el(
        'tr',
        { class: 'sink-row' },
        el('th', { scope: 'row' }, 'sink'),
        el('td', { colSpan: 3 }, 'no value row'),
        el('td', { 'data-stage': 'softmax', style: `background:${rampColor(sinkMass)}` }, fmtProb(sinkMass)),
      ),
    );
  }
  $('stages').replaceChildren(
    el('caption', {}, `Query ${token} “${labels[token]}”, head ${head}: its scores at each stage`),
    el('thead', {}, header),
    el('tbody', {}, ...body),
  );
  $('stages').dataset.head = String(head);
  $('stages').dataset.token = String(token);
}

/**
 * The score of one vector x (length Dh) against itself placed `distance` positions earlier, for distances
 * 0..N, with RoPE of base theta: mha.attentionWeights at stage 'scaled', q = x at position N, k = N + 1 copies
 * of x at positions 0..N. Entry d is the score at distance d.
 */
export function ropeScores(mha, x, theta, N) {
  const Dh = x.length;
  const k = new Float32Array((N + 1) * Dh);
  for (let j = 0; j <= N; j++) k.set(x, j * Dh);
  const rope = { ...mha.ropeTables({ rotaryDim: Dh, positions: N + 1, theta }) };
  const dims = { batch: 1, seqLen: 1, kvSeqLen: N + 1, dModel: Dh, numHeads: 1, queryOffset: N };
  const scores = mha.attentionWeights(x, k, { ...dims, rope, stage: 'scaled' });
  const plain = mha.attentionWeights(x, k.subarray(0, Dh), { ...dims, kvSeqLen: 1, queryOffset: 0, stage: 'scaled' });
  return { byDistance: Array.from({ length: N + 1 }, (_, d) => scores[N - d]), plain: plain[0] };
}

/** Line chart of ropeScores on #rope-chart, sized to its container. */
export function renderRopeChart(mha, { x, theta, enabled, word }) {
  const N = 64;
  const Dh = x.length;
  const sub = $('rope-sub');
  const canvas = $('rope-chart');
  if (Dh < 2 || Dh % 2 !== 0) {
    sub.textContent = `RoPE needs an even head size; this one is ${Dh}.`;
    canvas.hidden = true;
    return null;
  }
  canvas.hidden = false;
  const { byDistance, plain } = ropeScores(mha, x, theta, N);
  sub.textContent =
    `The key of “${word}” (head size ${Dh}) scored against itself ${N} positions apart at most, θ = ${theta}. ` +
    `Without RoPE every distance scores ${plain.toFixed(2)} (dashed); with it the score falls and wobbles as the ` +
    `pairs of entries turn at different speeds. ${enabled ? 'RoPE is on in the maps.' : 'RoPE is off in the maps (tick it above).'}`;
  const width = Math.max(240, canvas.parentElement.clientWidth - 4);
  const height = 170;
  const ctx = prepareCanvas(canvas, width, height);
  const pad = { left: 44, right: 10, top: 10, bottom: 28 };
  const lo = Math.min(0, plain, ...byDistance);
  const hi = Math.max(plain, ...byDistance);
  const xAt = (d) => pad.left + (d / N) * (width - pad.left - pad.right);
  const yAt = (v) => pad.top + ((hi - v) / (hi - lo || 1)) * (height - pad.top - pad.bottom);
  ctx.strokeStyle = '#cbd5e1';
  ctx.strokeRect(pad.left, pad.top, width - pad.left - pad.right, height - pad.top - pad.bottom);
  ctx.fillStyle = '#334155';
  ctx.font = '11px system-ui, sans-serif';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const v of new Set([lo, 0, hi])) ctx.fillText(v.toFixed(2), pad.left - 4, yAt(v));
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (let d = 0; d <= N; d += 16) ctx.fillText(String(d), xAt(d), height - pad.bottom + 4);
  ctx.fillText('distance (positions)', (pad.left + width) / 2, height - 13);
  ctx.setLineDash([4, 4]);
  ctx.strokeStyle = '#94a3b8';
  ctx.beginPath();
  ctx.moveTo(xAt(0), yAt(plain));
  ctx.lineTo(xAt(N), yAt(plain));
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.strokeStyle = '#2563eb';
  ctx.lineWidth = 2;
  ctx.beginPath();
  byDistance.forEach((v, d) => (d ? ctx.lineTo(xAt(d), yAt(v)) : ctx.moveTo(xAt(d), yAt(v))));
  ctx.stroke();
  ctx.lineWidth = 1;
  canvas.setAttribute(
    'aria-label',
    `RoPE score of two equal tokens: ${byDistance[0].toFixed(2)} at distance 0, ${byDistance[8].toFixed(2)} at 8, ` +
      `${byDistance[N].toFixed(2)} at ${N}; ${plain.toFixed(2)} at every distance without RoPE`,
  );
  return byDistance;
}
