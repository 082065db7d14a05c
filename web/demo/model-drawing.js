// The real-model view's drawing: the text as it is generated, the speed cells, one heatmap row per layer x
// head (the newest query's attention over the T keys held) and the selected head's (S, S) pattern over the
// prompt, batched into one animation frame. Plain DOM + canvas over model-state.js.
//
// Shapes: L layers, H heads, S prompt bytes, T keys held (the context so far).
import { RAMP, headColor, rampColor } from './colors.js';
import { $, headInfo, section, state, ui } from './model-state.js';
import { liveScore } from './model-scores.js';

/** A byte as a one-character label: printable ASCII as itself, space, newline, else hex. */
const byteLabel = (b) =>
  b === 32 ? '␣' : b === 10 ? '↵' : b > 32 && b < 127 ? String.fromCharCode(b) : b.toString(16).padStart(2, '0');
const fmtRate = (n, ms) => (ms > 0 && n > 0 ? `${Math.round(n / (ms / 1000)).toLocaleString('en-US')} tokens/s` : '–');
const fmtScore = (x) => (Number.isFinite(x) ? x.toFixed(3) : '–');
const SPEED_CELLS = ['real-rate', 'real-attention-rate', 'real-share', 'real-prefill'];

/** The legend's gradient: the color ramp of every heatmap of the view. */
export function drawLegend() {
  $('real-legend').style.background = `linear-gradient(to right, ${RAMP.join(', ')})`;
}

/** Empties the speed cells (another model: the last one's figures do not describe it). */
export function clearSpeed() {
  for (const id of SPEED_CELLS) $(id).textContent = '–';
}

export function buildHeadRows() {
  const { layers: L, heads: H, kvHeads } = state.dims;
  const headsPerKv = H / kvHeads; // a KV head's query heads are drawn with one color
  ui.heads.replaceChildren();
  for (let layer = 0; layer < L; layer++) {
    const group = document.createElement('div');
    group.className = 'real-layer';
    const title = document.createElement('h3');
    title.textContent = `Layer ${layer}`;
    group.append(title);
    for (let head = 0; head < H; head++) {
      const row = document.createElement('div');
      row.className = 'real-head';
      const kvHead = Math.floor(head / headsPerKv);
      row.dataset.kvHead = String(kvHead);
      row.style.borderLeftColor = headColor(kvHead * 3);
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'head-btn';
      Object.assign(button.dataset, { layer, head });
      const labels = headInfo(layer, head)?.labels ?? [];
      button.innerHTML = `<span class="head-name">L${layer} H${head}</span><span class="kv-name">KV ${kvHead}</span>${labels.map((l) => `<span class="badge">${l}</span>`).join('')}<span class="head-score"></span>`;
      button.setAttribute(
        'aria-label',
        `layer ${layer} head ${head}, KV head ${kvHead}${labels.length ? ` (${labels.join(', ')} head)` : ''}: show its pattern over the prompt`,
      );
      button.addEventListener('click', () => {
        state.selected = { layer, head };
        scheduleDraw(true);
      });
      const canvas = document.createElement('canvas');
      canvas.className = 'head-row';
      Object.assign(canvas.dataset, { layer, head });
      canvas.setAttribute('role', 'img');
      row.append(button, canvas);
      group.append(row);
    }
    ui.heads.append(group);
  }
}

export function scheduleDraw(detail) {
  state.detailDirty ||= detail;
  if (state.drawPending) return;
  state.drawPending = true;
  requestAnimationFrame(() => {
    state.drawPending = false;
    drawText();
    drawSpeed();
    drawRows();
    if (state.detailDirty) {
      state.detailDirty = false;
      drawDetail();
    }
    section.dataset.draws = String(Number(section.dataset.draws ?? 0) + 1);
  });
}

export function drawText() {
  const decode = (bytes) => new TextDecoder().decode(Uint8Array.from(bytes));
  ui.promptText.textContent = decode(state.tokens.slice(0, state.promptLength));
  ui.generatedText.textContent = decode(state.tokens.slice(state.promptLength));
}

function drawSpeed() {
  const t = state.timing,
    p = state.prefillTiming;
  if (!t || !p) return;
  const steps = t.tokens - p.tokens,
    forwardMs = t.forwardMs - p.forwardMs,
    attentionMs = t.attentionMs - p.attentionMs;
  const r = state.restored;
  const cells = {
    'real-rate': fmtRate(steps, forwardMs),
    'real-attention-rate': fmtRate(steps, attentionMs),
    'real-share': forwardMs > 0 ? `${((100 * attentionMs) / forwardMs).toFixed(1)} %` : '–',
    'real-prefill': r
      ? `none: ${r.tokens} tokens restored from IndexedDB${Number.isFinite(r.ms) ? ` in ${r.ms.toFixed(1)} ms` : ''}`
      : `${p.tokens} bytes in ${p.forwardMs.toFixed(1)} ms (attention ${p.attentionMs.toFixed(1)} ms)`,
  };
  for (const [id, text] of Object.entries(cells)) $(id).textContent = text;
}

/** Sets a canvas' backing store to its CSS box times the device pixel ratio; returns its 2D context. */
function sizeCanvas(canvas, cssWidth, cssHeight) {
  const ratio = window.devicePixelRatio || 1;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  canvas.width = Math.round(cssWidth * ratio);
  canvas.height = Math.round(cssHeight * ratio);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/** Each head's row: the attention of the newest query over the T keys, darkest = that row's maximum. */
function drawRows() {
  if (!state.rows) return;
  const { heads: H } = state.dims,
    T = state.kvLength;
  for (const canvas of ui.heads.querySelectorAll('canvas.head-row')) {
    const layer = Number(canvas.dataset.layer),
      head = Number(canvas.dataset.head);
    const width = canvas.clientWidth; // CSS: the rest of the row's width, 14 px high
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(14 * ratio);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const row = state.rows[layer].subarray(head * T, (head + 1) * T);
    let max = 0;
    for (const w of row) max = Math.max(max, w);
    const cell = width / T;
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = rampColor(row[j] / max);
      ctx.fillRect(j * cell, 0, Math.ceil(cell), 14);
    }
    let argmax = 0;
    for (let j = 1; j < T; j++) if (row[j] > row[argmax]) argmax = j;
    canvas.setAttribute(
      'aria-label',
      `layer ${layer} head ${head}: the newest query puts ${row[argmax].toFixed(2)} on byte ${argmax} (${byteLabel(state.tokens[argmax])})`,
    );
    canvas.previousElementSibling.querySelector('.head-score').textContent =
      `prev ${fmtScore(liveScore('previousToken', layer, head))} · ind ${fmtScore(liveScore('induction', layer, head))}`;
  }
  const selected = ui.heads.querySelector(`.head-btn[aria-pressed="true"]`);
  selected?.setAttribute('aria-pressed', 'false');
  ui.heads
    .querySelector(`.head-btn[data-layer="${state.selected.layer}"][data-head="${state.selected.head}"]`)
    ?.setAttribute('aria-pressed', 'true');
}

/** The selected head's (S, S) pattern over the prompt, with the prompt's bytes along both axes. */
function drawDetail() {
  if (!state.prefillWeights) return;
  const { layer, head } = state.selected;
  const S = state.promptLength,
    H = state.dims.heads;
  const weights = state.prefillWeights[layer].subarray(head * S * S, (head + 1) * S * S);
  const padding =
    parseFloat(getComputedStyle(ui.detail).paddingLeft) + parseFloat(getComputedStyle(ui.detail).paddingRight);
  const available = Math.min(ui.detail.clientWidth - padding, 720);
  const label = 14;
  const cell = Math.max(1, Math.min(16, Math.floor((available - label) / S)));
  const size = label + cell * S;
  const canvas = ui.detailCanvas;
  const ctx = sizeCanvas(canvas, size, size);
  Object.assign(canvas.dataset, { layer, head, cell, left: label, top: label, rows: S });
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, size, size);
  for (let i = 0; i < S; i++) {
    let max = 0;
    for (let j = 0; j <= i; j++) max = Math.max(max, weights[i * S + j]);
    for (let j = 0; j < S; j++) {
      ctx.fillStyle = j > i ? '#e4e4e7' : rampColor(weights[i * S + j] / max);
      ctx.fillRect(label + j * cell, label + i * cell, cell, cell);
    }
  }
  // Byte labels: every byte when a cell is wide enough for a glyph, else every k-th.
  const every = Math.ceil(8 / cell);
  ctx.fillStyle = '#334155';
  ctx.font = `${Math.min(11, Math.max(8, cell - 2))}px ui-monospace, monospace`;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  for (let i = 0; i < S; i += every) {
    const text = byteLabel(state.tokens[i]);
    ctx.fillText(text, label + (i + 0.5) * cell, label / 2);
    ctx.fillText(text, label / 2, label + (i + 0.5) * cell);
  }
  const info = headInfo(layer, head);
  const kvHead = Math.floor(head / (H / state.dims.kvHeads));
  ui.detailTitle.textContent = `Layer ${layer}, head ${head} (KV head ${kvHead})${info?.labels.length ? `: ${info.labels.join(', ')} head` : ''}`;
  canvas.setAttribute(
    'aria-label',
    `attention pattern of layer ${layer} head ${head} over the ${S}-byte prompt; rows are queries, columns are keys, each row scaled to its maximum`,
  );
  const live =
    `Mean attention to the previous byte: ${fmtScore(liveScore('previousToken', layer, head))} over this text; ` +
    `induction (attention to the byte after the last earlier occurrence of the current byte): ${fmtScore(liveScore('induction', layer, head))}.`;
  if (!info) {
    // tiny-llama: no training run labelled its heads
    ui.detailNote.textContent = live;
    return;
  }
  const i = layer * H + head;
  const recomputed = (name) =>
    state.reference[name] ? `${fmtScore(state.reference[name][i])} recomputed here` : 'not recomputed here yet';
  ui.detailNote.textContent =
    `Mean attention to the previous byte: ${fmtScore(liveScore('previousToken', layer, head))} over this text; ` +
    `on the training run's test sentences ${recomputed('previousToken')}, PyTorch ${fmtScore(info.previousToken)} (label at ${state.heads.previousToken.threshold}). ` +
    `Induction (attention to the byte after the last earlier occurrence of the current byte): ${fmtScore(liveScore('induction', layer, head))} over this text; ` +
    `on repeated random sequences ${recomputed('induction')}, PyTorch ${fmtScore(info.induction)} (label at ${state.heads.induction.threshold}).`;
}
