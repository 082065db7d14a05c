// The demo's real-model view: tiny-gpt (models/tiny-gpt) generating text byte by byte in a Worker
// (tiny-gpt-worker.js), with every layer x head's attention of the newest query drawn as one heatmap row,
// a head's full (S, T) pattern over the prompt on click, and the head labels of the training run backed by
// scores computed here. Plain DOM + canvas.
//
// Shapes: L layers, H heads, S prompt bytes, T keys held (the context so far).
import { RAMP, rampColor } from './colors.js';
import { accumulateTargetWeights, inductionTargets, previousTokenTargets } from '../../models/tiny-gpt/head-scores.mjs';

const $ = (id) => document.getElementById(id);
const section = $('real-model');
const ui = {
  form: $('real-form'), prompt: $('real-prompt'), count: $('real-count'), cache: $('real-cache'), sampling: $('real-sampling'),
  run: $('real-run'), status: $('real-status'), promptText: $('real-text-prompt'), generatedText: $('real-text-generated'),
  speed: $('real-speed'), heads: $('real-heads'), detail: $('real-detail'), detailTitle: $('real-detail-title'),
  detailCanvas: $('real-detail-canvas'), detailNote: $('real-detail-note'), verify: $('real-verify'),
};

const state = {
  worker: null, config: null, heads: null, reference: {}, running: false, job: 0,
  tokens: [], promptLength: 0, prefillWeights: null, rows: null, kvLength: 0, selected: { layer: 0, head: 4 },
  scores: null, prefillTiming: null, timing: null, drawPending: false,
};

/** A byte as a one-character label: printable ASCII as itself, space, newline, else hex. */
const byteLabel = (b) => (b === 32 ? '␣' : b === 10 ? '↵' : b > 32 && b < 127 ? String.fromCharCode(b) : b.toString(16).padStart(2, '0'));
const fmtRate = (n, ms) => (ms > 0 && n > 0 ? `${Math.round(n / (ms / 1000)).toLocaleString('en-US')} tokens/s` : '–');
const fmtScore = (x) => (Number.isFinite(x) ? x.toFixed(3) : '–');
const headInfo = (layer, head) => state.heads.heads.find((e) => e.layer === layer && e.head === head);

// ---------------------------------------------------------------------------------------------
// The Worker.

function startWorker() {
  state.worker?.terminate();
  state.worker = new Worker(new URL('./tiny-gpt-worker.js', import.meta.url), { type: 'module' });
  state.worker.onmessage = ({ data }) => onMessage(data);
  state.worker.onerror = (e) => fail(e.message || 'the model worker failed to start');
  state.verifying = false;
  ui.verify.disabled = false;
  section.dataset.state = 'loading';
  ui.run.disabled = true;
  ui.status.textContent = 'Loading tiny-gpt (5.8 MB of weights, cached by the browser after the first visit)…';
  state.worker.postMessage({ type: 'load' });
}

function fail(message) {
  section.dataset.state = 'error';
  state.running = false;
  ui.run.disabled = false;
  ui.run.textContent = 'Generate';
  ui.status.textContent = `Error: ${message}`;
}

function onMessage(data) {
  if (data.type === 'error') return fail(data.message);
  if (data.type === 'loaded') {
    Object.assign(state, { config: data.config, heads: data.heads });
    const { n_layer: L, n_head: H, n_kv_head: Hkv, d_model: D, n_ctx } = data.config;
    const transfer = data.weightsTransferBytes === null ? '' : data.weightsTransferBytes < 5000 ? ', weights from the browser cache' : `, ${(data.weightsTransferBytes / 1e6).toFixed(1)} MB of weights downloaded`;
    ui.status.textContent = `tiny-gpt loaded in ${Math.round(data.loadMs)} ms${transfer}: ${L} layers, ${H} query heads sharing ${Hkv} KV heads, d_model ${D}, context ${n_ctx} bytes; mha-wasm ${data.info.version} (${data.info.build}).`;
    section.dataset.transferBytes = String(data.weightsTransferBytes);
    buildHeadRows();
    section.dataset.state = 'ready';
    ui.run.disabled = false;
    if (state.pendingStart) { state.pendingStart = false; start(); }
    return;
  }
  if (data.type === 'reference') {
    state.reference[data.name] = data.scores;
    section.dataset.reference = data.name;
    if (data.name === 'induction') { state.verifying = false; ui.verify.disabled = false; }
    scheduleDraw(true);
    return;
  }
  if (data.type === 'prefill') {
    state.prefillWeights = data.weights;
    state.prefillTiming = data.timing;
    const S = data.tokens.length;
    for (let layer = 0; layer < state.config.n_layer; layer++) addScores(layer, data.weights[layer], S, S, 0);
    scheduleDraw(true);
    return;
  }
  if (data.type === 'token') {
    const T = data.kvLength;
    // The first token's row is the prompt's last prefill row, counted above; later rows are new queries.
    if (state.tokens.length > state.promptLength) for (let layer = 0; layer < state.config.n_layer; layer++) addScores(layer, data.rows[layer], 1, T, T - 1);
    state.tokens.push(data.token);
    Object.assign(state, { rows: data.rows, kvLength: T, timing: data.timing });
    section.dataset.generated = String(state.tokens.length - state.promptLength);
    scheduleDraw(false);
    return;
  }
  if (data.type === 'done') {
    state.timing = data.timing;
    state.running = false;
    section.dataset.state = 'done';
    ui.run.textContent = 'Generate';
    scheduleDraw(false);
  }
}

// ---------------------------------------------------------------------------------------------
// Live head scores: sums and counts per (layer, head) of the weight each query puts on its target.

function resetScores() {
  const n = state.config.n_layer * state.config.n_head;
  state.scores = { previousToken: { sums: new Float64Array(n), counts: new Float64Array(n) }, induction: { sums: new Float64Array(n), counts: new Float64Array(n) } };
}

/** weights (H, S, T) of queries at positions queryOffset .. + S - 1 of layer. */
function addScores(layer, weights, S, T, queryOffset) {
  const H = state.config.n_head;
  for (const [name, targetsOf] of [['previousToken', previousTokenTargets], ['induction', inductionTargets]]) {
    const { sums, counts } = state.scores[name];
    const at = [layer * H, (layer + 1) * H];
    accumulateTargetWeights(sums.subarray(...at), counts.subarray(...at), weights, H, S, T, queryOffset, targetsOf(state.tokens));
  }
}

const liveScore = (name, layer, head) => {
  const { sums, counts } = state.scores[name];
  const i = layer * state.config.n_head + head;
  return counts[i] ? sums[i] / counts[i] : NaN;
};

// ---------------------------------------------------------------------------------------------
// Generation.

function start() {
  if (state.running) { // Stop: a fresh Worker (the weights come from the browser cache)
    startWorker();
    state.running = false;
    ui.run.textContent = 'Generate';
    return;
  }
  const bytes = [...new TextEncoder().encode(ui.prompt.value)];
  const nCtx = state.config.n_ctx;
  const count = Number(ui.count.value);
  let problem = '';
  if (bytes.length < 1) problem = 'Type a prompt of at least one character.';
  else if (bytes.length > 200) problem = `The prompt is ${bytes.length} bytes; at most 200 fit with room to generate.`;
  else if (!Number.isInteger(count) || count < 1 || bytes.length + count > nCtx) problem = `Bytes to generate: expected an integer from 1 to ${nCtx - bytes.length} (the context is ${nCtx} bytes, the prompt takes ${bytes.length}).`;
  ui.status.textContent = problem;
  if (problem) { section.dataset.state = 'invalid'; return; }
  state.job++;
  Object.assign(state, { running: true, tokens: [...bytes], promptLength: bytes.length, prefillWeights: null, rows: null, kvLength: 0, timing: null, prefillTiming: null });
  resetScores();
  section.dataset.state = 'generating';
  section.dataset.job = String(state.job);
  section.dataset.generated = '0';
  ui.run.textContent = 'Stop';
  const sampling = ui.sampling.value;
  state.worker.postMessage({
    type: 'generate', prompt: bytes, count, dtype: ui.cache.value, greedy: sampling === 'greedy', temperature: 0.8, topK: 40, seed: 1,
  });
}

// ---------------------------------------------------------------------------------------------
// Drawing.

function buildHeadRows() {
  const { n_layer: L, n_head: H } = state.config;
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
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'head-btn';
      Object.assign(button.dataset, { layer, head });
      const labels = headInfo(layer, head)?.labels ?? [];
      button.innerHTML = `<span class="head-name">L${layer} H${head}</span>${labels.map((l) => `<span class="badge">${l}</span>`).join('')}<span class="head-score"></span>`;
      button.setAttribute('aria-label', `layer ${layer} head ${head}${labels.length ? ` (${labels.join(', ')} head)` : ''}: show its pattern over the prompt`);
      button.addEventListener('click', () => { state.selected = { layer, head }; scheduleDraw(true); });
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

function scheduleDraw(detail) {
  state.detailDirty ||= detail;
  if (state.drawPending) return;
  state.drawPending = true;
  requestAnimationFrame(() => {
    state.drawPending = false;
    drawText();
    drawSpeed();
    drawRows();
    if (state.detailDirty) { state.detailDirty = false; drawDetail(); }
    section.dataset.draws = String(Number(section.dataset.draws ?? 0) + 1);
  });
}

function drawText() {
  const decode = (bytes) => new TextDecoder().decode(Uint8Array.from(bytes));
  ui.promptText.textContent = decode(state.tokens.slice(0, state.promptLength));
  ui.generatedText.textContent = decode(state.tokens.slice(state.promptLength));
}

function drawSpeed() {
  const t = state.timing, p = state.prefillTiming;
  if (!t || !p) return;
  const steps = t.tokens - p.tokens, forwardMs = t.forwardMs - p.forwardMs, attentionMs = t.attentionMs - p.attentionMs;
  const cells = {
    'real-rate': fmtRate(steps, forwardMs),
    'real-attention-rate': fmtRate(steps, attentionMs),
    'real-share': forwardMs > 0 ? `${((100 * attentionMs) / forwardMs).toFixed(1)} %` : '–',
    'real-prefill': `${p.tokens} bytes in ${p.forwardMs.toFixed(1)} ms (attention ${p.attentionMs.toFixed(1)} ms)`,
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
  const { n_head: H } = state.config, T = state.kvLength;
  for (const canvas of ui.heads.querySelectorAll('canvas.head-row')) {
    const layer = Number(canvas.dataset.layer), head = Number(canvas.dataset.head);
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
    canvas.setAttribute('aria-label', `layer ${layer} head ${head}: the newest query puts ${row[argmax].toFixed(2)} on byte ${argmax} (${byteLabel(state.tokens[argmax])})`);
    canvas.previousElementSibling.querySelector('.head-score').textContent = `prev ${fmtScore(liveScore('previousToken', layer, head))} · ind ${fmtScore(liveScore('induction', layer, head))}`;
  }
  const selected = ui.heads.querySelector(`.head-btn[aria-pressed="true"]`);
  selected?.setAttribute('aria-pressed', 'false');
  ui.heads.querySelector(`.head-btn[data-layer="${state.selected.layer}"][data-head="${state.selected.head}"]`)?.setAttribute('aria-pressed', 'true');
}

/** The selected head's (S, S) pattern over the prompt, with the prompt's bytes along both axes. */
function drawDetail() {
  if (!state.prefillWeights) return;
  const { layer, head } = state.selected;
  const S = state.promptLength, H = state.config.n_head;
  const weights = state.prefillWeights[layer].subarray(head * S * S, (head + 1) * S * S);
  const padding = parseFloat(getComputedStyle(ui.detail).paddingLeft) + parseFloat(getComputedStyle(ui.detail).paddingRight);
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
  const kvHead = Math.floor(head / (H / state.config.n_kv_head));
  ui.detailTitle.textContent = `Layer ${layer}, head ${head} (KV head ${kvHead})${info.labels.length ? `: ${info.labels.join(', ')} head` : ''}`;
  canvas.setAttribute('aria-label', `attention pattern of layer ${layer} head ${head} over the ${S}-byte prompt; rows are queries, columns are keys, each row scaled to its maximum`);
  const i = layer * H + head;
  const recomputed = (name) => (state.reference[name] ? `${fmtScore(state.reference[name][i])} recomputed here` : 'not recomputed here yet');
  ui.detailNote.textContent = `Mean attention to the previous byte: ${fmtScore(liveScore('previousToken', layer, head))} over this text; ` +
    `on the training run's test sentences ${recomputed('previousToken')}, PyTorch ${fmtScore(info.previousToken)} (label at ${state.heads.previousToken.threshold}). ` +
    `Induction (attention to the byte after the last earlier occurrence of the current byte): ${fmtScore(liveScore('induction', layer, head))} over this text; ` +
    `on repeated random sequences ${recomputed('induction')}, PyTorch ${fmtScore(info.induction)} (label at ${state.heads.induction.threshold}).`;
}

// ---------------------------------------------------------------------------------------------

$('real-legend').style.background = `linear-gradient(to right, ${RAMP.join(', ')})`;
ui.verify.addEventListener('click', () => {
  if (state.running || section.dataset.state === 'loading' || state.verifying) return;
  state.verifying = true;
  state.reference = {};
  ui.verify.disabled = true;
  section.dataset.reference = 'running';
  state.worker.postMessage({ type: 'reference' });
});
ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  if (section.dataset.state === 'loading') state.pendingStart = true;
  else start();
});
let resizeTimer = 0;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => scheduleDraw(true), 100);
});
startWorker();
