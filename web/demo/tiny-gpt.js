// The demo's real-model view: tiny-gpt (models/tiny-gpt) or tiny-llama (models/tiny-llama) generating text
// byte by byte in a Worker (tiny-gpt-worker.js); for tiny-gpt, every layer x head's attention of the newest
// query drawn as one heatmap row, a head's full (S, T) pattern over the prompt on click, and the head labels
// of the training run backed by scores computed here. A finished conversation can be saved in IndexedDB
// (real-model-save.js) and, after a reload, continued from its KV caches without a prefill. Plain DOM + canvas.
//
// Shapes: L layers, H heads, S prompt bytes, T keys held (the context so far).
import { RAMP, rampColor } from './colors.js';
import { accumulateTargetWeights, inductionTargets, previousTokenTargets } from '../../models/tiny-gpt/head-scores.mjs';
import { saveControls } from './real-model-save.js';

const $ = (id) => document.getElementById(id);
const section = $('real-model');
const ui = {
  form: $('real-form'),
  prompt: $('real-prompt'),
  count: $('real-count'),
  cache: $('real-cache'),
  sampling: $('real-sampling'),
  run: $('real-run'),
  status: $('real-status'),
  promptText: $('real-text-prompt'),
  generatedText: $('real-text-generated'),
  speed: $('real-speed'),
  heads: $('real-heads'),
  detail: $('real-detail'),
  detailTitle: $('real-detail-title'),
  detailCanvas: $('real-detail-canvas'),
  detailNote: $('real-detail-note'),
  verify: $('real-verify'),
  picker: $('real-model-picker'),
  title: $('real-title'),
  save: $('real-save'),
  resume: $('real-continue'),
  cacheInfo: $('real-cache-info'),
};
const saver = saveControls({ section, save: ui.save, resume: ui.resume, status: $('real-save-status') });
const TITLES = {
  'tiny-gpt': 'A real model: tiny-gpt writes, and you watch its heads',
  'tiny-llama': 'A real model: tiny-llama writes, from a KV cache you can save',
};

const state = {
  worker: null,
  config: null,
  heads: null,
  reference: {},
  running: false,
  job: 0,
  tokens: [],
  promptLength: 0,
  prefillWeights: null,
  rows: null,
  kvLength: 0,
  selected: { layer: 0, head: 4 },
  scores: null,
  prefillTiming: null,
  timing: null,
  drawPending: false,
  model: 'tiny-gpt',
  dims: null,
  run: null,
  restored: null,
};

/** A byte as a one-character label: printable ASCII as itself, space, newline, else hex. */
const byteLabel = (b) =>
  b === 32 ? '␣' : b === 10 ? '↵' : b > 32 && b < 127 ? String.fromCharCode(b) : b.toString(16).padStart(2, '0');
const fmtRate = (n, ms) => (ms > 0 && n > 0 ? `${Math.round(n / (ms / 1000)).toLocaleString('en-US')} tokens/s` : '–');
const fmtScore = (x) => (Number.isFinite(x) ? x.toFixed(3) : '–');
const headInfo = (layer, head) => state.heads.heads.find((e) => e.layer === layer && e.head === head);

// ---------------------------------------------------------------------------------------------
// The Worker.

function startWorker() {
  state.worker?.terminate();
  state.model = ui.picker.value;
  // What only tiny-gpt has (heads.json, the K rows for the weights) is hidden for tiny-llama
  for (const node of section.querySelectorAll('.gpt-only')) node.hidden = state.model !== 'tiny-gpt';
  for (const node of section.querySelectorAll('p[data-model]')) node.hidden = node.dataset.model !== state.model;
  ui.title.textContent = TITLES[state.model];
  section.dataset.model = state.model;
  ui.save.disabled = true;
  ui.resume.hidden = true;
  state.restoring = false;
  state.worker = new Worker(new URL('./tiny-gpt-worker.js', import.meta.url), { type: 'module' });
  state.worker.onmessage = ({ data }) => onMessage(data);
  state.worker.onerror = (e) => fail(e.message || 'the model worker failed to start');
  state.verifying = false;
  ui.verify.disabled = false;
  section.dataset.state = 'loading';
  ui.run.disabled = true;
  ui.status.textContent = `Loading ${state.model} (5.8 MB of weights, cached by the browser after the first visit)…`;
  state.worker.postMessage({ type: 'load', model: state.model });
}

function fail(message) {
  section.dataset.state = 'error';
  state.running = false;
  ui.run.disabled = false;
  ui.run.textContent = 'Generate';
  ui.status.textContent = `Error: ${message}`;
  if (state.restoring) {
    state.restoring = false;
    saver.say(`The saved conversation could not be continued: ${message}`);
  }
}

function onMessage(data) {
  if (data.type === 'error') return fail(data.message);
  if (data.type === 'loaded') {
    if (data.model !== state.model) return; // a Worker of the model picked before
    Object.assign(state, { config: data.config, heads: data.heads, dims: data.dims });
    const { layers: L, heads: H, kvHeads: Hkv, dModel: D, context } = data.dims;
    const transfer =
      data.weightsTransferBytes === null
        ? ''
        : data.weightsTransferBytes < 5000
          ? ', weights from the browser cache'
          : `, ${(data.weightsTransferBytes / 1e6).toFixed(1)} MB of weights downloaded`;
    ui.status.textContent = `${data.model} loaded in ${Math.round(data.loadMs)} ms${transfer}: ${L} layers, ${H} query heads sharing ${Hkv} KV heads, d_model ${D}, context ${context} bytes; mha-wasm ${data.info.version} (${data.info.build}).`;
    section.dataset.transferBytes = String(data.weightsTransferBytes);
    if (data.heads) buildHeadRows();
    section.dataset.state = 'ready';
    ui.run.disabled = false;
    if (state.pendingStart) {
      state.pendingStart = false;
      start();
    }
    const model = data.model;
    saver.refresh(model).then(() => {
      if (model === state.model) section.dataset.savedChecked = model;
    });
    return;
  }
  if (data.type === 'state') return storeState(data);
  if (data.type === 'restored') {
    state.restored = { tokens: data.tokens, ms: data.ms };
    section.dataset.restoredTokens = String(data.tokens);
    saver.say(
      `Restored ${data.tokens} tokens from IndexedDB in ${data.ms.toFixed(1)} ms (mha.loadKVCache per layer), no prefill; generating on from the last byte.`,
    );
    return;
  }
  if (data.type === 'reference') {
    state.reference[data.name] = data.scores;
    section.dataset.reference = data.name;
    if (data.name === 'induction') {
      state.verifying = false;
      ui.verify.disabled = false;
    }
    scheduleDraw(true);
    return;
  }
  if (data.type === 'prefill') {
    state.prefillWeights = data.weights;
    state.prefillTiming = data.timing;
    const S = data.tokens.length;
    if (data.weights)
      for (let layer = 0; layer < state.dims.layers; layer++) addScores(layer, data.weights[layer], S, S, 0);
    scheduleDraw(true);
    return;
  }
  if (data.type === 'token') {
    const T = data.kvLength;
    // The first token's row is the prompt's last prefill row, counted above; later rows are new queries.
    if (data.rows && state.tokens.length > state.promptLength)
      for (let layer = 0; layer < state.dims.layers; layer++) addScores(layer, data.rows[layer], 1, T, T - 1);
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
    const c = data.cache;
    ui.cacheInfo.textContent = `${c.layers} layers × ${c.tokens} of ${c.capacity} tokens, ${c.dtype}: ${Math.round(c.bytes / 1024).toLocaleString('en-US')} KB`;
    if (state.restored) {
      // the tokens the model ran beyond one per new byte: 0 when the restored history was not run again
      section.dataset.prefillTokens = String(data.timing.tokens - (state.tokens.length - state.restored.tokens - 1));
      state.restoring = false;
    }
    ui.save.disabled = false;
    scheduleDraw(false);
  }
}

// ---------------------------------------------------------------------------------------------
// Live head scores: sums and counts per (layer, head) of the weight each query puts on its target.

function resetScores() {
  const n = state.dims.layers * state.dims.heads;
  state.scores = {
    previousToken: { sums: new Float64Array(n), counts: new Float64Array(n) },
    induction: { sums: new Float64Array(n), counts: new Float64Array(n) },
  };
}

/** weights (H, S, T) of queries at positions queryOffset .. + S - 1 of layer. */
function addScores(layer, weights, S, T, queryOffset) {
  const H = state.dims.heads;
  for (const [name, targetsOf] of [
    ['previousToken', previousTokenTargets],
    ['induction', inductionTargets],
  ]) {
    const { sums, counts } = state.scores[name];
    const at = [layer * H, (layer + 1) * H];
    accumulateTargetWeights(
      sums.subarray(...at),
      counts.subarray(...at),
      weights,
      H,
      S,
      T,
      queryOffset,
      targetsOf(state.tokens),
    );
  }
}

const liveScore = (name, layer, head) => {
  const { sums, counts } = state.scores[name];
  const i = layer * state.dims.heads + head;
  return counts[i] ? sums[i] / counts[i] : NaN;
};

// ---------------------------------------------------------------------------------------------
// Generation.

function start() {
  if (state.running) {
    // Stop: a fresh Worker (the weights come from the browser cache)
    startWorker();
    state.running = false;
    ui.run.textContent = 'Generate';
    return;
  }
  const bytes = [...new TextEncoder().encode(ui.prompt.value)];
  const nCtx = state.dims.context;
  const count = Number(ui.count.value);
  let problem = '';
  if (bytes.length < 1) problem = 'Type a prompt of at least one character.';
  else if (bytes.length > 200) problem = `The prompt is ${bytes.length} bytes; at most 200 fit with room to generate.`;
  else if (!Number.isInteger(count) || count < 1 || bytes.length + count > nCtx)
    problem = `Bytes to generate: expected an integer from 1 to ${nCtx - bytes.length} (the context is ${nCtx} bytes, the prompt takes ${bytes.length}).`;
  ui.status.textContent = problem;
  if (problem) {
    section.dataset.state = 'invalid';
    return;
  }
  const run = { dtype: ui.cache.value, greedy: ui.sampling.value === 'greedy', temperature: 0.8, topK: 40, seed: 1 };
  begin({ tokens: [...bytes], promptLength: bytes.length, run, restored: null });
  state.worker.postMessage({ type: 'generate', prompt: bytes, count, ...run });
}

/** The page's side of a new generation (fresh or continued): clears what the last one showed. */
function begin({ tokens, promptLength, run, restored }) {
  state.job++;
  Object.assign(state, {
    running: true,
    tokens,
    promptLength,
    run,
    restored,
    prefillWeights: null,
    rows: null,
    kvLength: 0,
    timing: null,
    prefillTiming: null,
  });
  resetScores();
  section.dataset.state = 'generating';
  section.dataset.job = String(state.job);
  section.dataset.generated = '0';
  delete section.dataset.restoredTokens;
  delete section.dataset.prefillTokens;
  ui.run.textContent = 'Stop';
  ui.save.disabled = true;
  ui.cacheInfo.textContent = '–';
}

// ---------------------------------------------------------------------------------------------
// Saving and continuing (the record's fields: saved-conversations.js).

/** The Worker's state of the finished generation, stored with what the page needs to continue it. */
function storeState({ tokens, caches, pending, dtype }) {
  const { promptLength, run } = state;
  saver.store({
    model: state.model,
    dtype,
    promptLength,
    tokens,
    pending,
    caches,
    savedAt: new Date().toISOString(),
    // the bytes generated so far: the draws of the sampler's stream a continuation skips
    generated: tokens.length + 1 - promptLength,
    sampling: { greedy: run.greedy, temperature: run.temperature, topK: run.topK, seed: run.seed },
  });
}

/** The saved conversation restored in the Worker (no prefill), then "Bytes to generate" more. */
function continueSaved() {
  const record = saver.saved();
  if (!record || state.running || section.dataset.state === 'loading') return;
  const held = record.tokens.length + 1,
    nCtx = state.dims.context,
    count = Number(ui.count.value);
  if (!Number.isInteger(count) || count < 1 || held + count > nCtx) {
    ui.status.textContent =
      held >= nCtx
        ? `The saved conversation fills the ${nCtx}-byte context: nothing more fits.`
        : `Bytes to generate: expected an integer from 1 to ${nCtx - held} (the context is ${nCtx} bytes, the saved conversation takes ${held}).`;
    section.dataset.state = 'invalid';
    return;
  }
  // the saved settings, so that the bytes are the ones an uninterrupted generation gives
  ui.cache.value = record.dtype;
  ui.sampling.value = record.sampling.greedy ? 'greedy' : 'sample';
  const run = { dtype: record.dtype, ...record.sampling };
  begin({
    tokens: [...record.tokens, record.pending],
    promptLength: record.promptLength,
    run,
    restored: { tokens: record.tokens.length, ms: NaN },
  });
  state.restoring = true;
  state.prefillTiming = { tokens: 0, forwardMs: 0, attentionMs: 0 };
  scheduleDraw(false);
  state.worker.postMessage({
    type: 'continue',
    state: { tokens: record.tokens, caches: record.caches },
    pending: record.pending,
    count,
    ...run,
    drawn: record.generated,
  });
}

// ---------------------------------------------------------------------------------------------
// Drawing.

function buildHeadRows() {
  const { layers: L, heads: H } = state.dims;
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
      button.setAttribute(
        'aria-label',
        `layer ${layer} head ${head}${labels.length ? ` (${labels.join(', ')} head)` : ''}: show its pattern over the prompt`,
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

function scheduleDraw(detail) {
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

function drawText() {
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
  ui.detailTitle.textContent = `Layer ${layer}, head ${head} (KV head ${kvHead})${info.labels.length ? `: ${info.labels.join(', ')} head` : ''}`;
  canvas.setAttribute(
    'aria-label',
    `attention pattern of layer ${layer} head ${head} over the ${S}-byte prompt; rows are queries, columns are keys, each row scaled to its maximum`,
  );
  const i = layer * H + head;
  const recomputed = (name) =>
    state.reference[name] ? `${fmtScore(state.reference[name][i])} recomputed here` : 'not recomputed here yet';
  ui.detailNote.textContent =
    `Mean attention to the previous byte: ${fmtScore(liveScore('previousToken', layer, head))} over this text; ` +
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
ui.picker.addEventListener('change', () => {
  // another model: the last one's text, speed and rows do not describe it (Stop keeps them: same model)
  Object.assign(state, {
    running: false,
    tokens: [],
    promptLength: 0,
    rows: null,
    prefillWeights: null,
    timing: null,
    prefillTiming: null,
    restored: null,
  });
  ui.run.textContent = 'Generate';
  ui.cacheInfo.textContent = '–';
  for (const id of ['real-rate', 'real-attention-rate', 'real-share', 'real-prefill']) $(id).textContent = '–';
  drawText();
  startWorker();
});
ui.save.addEventListener('click', () => {
  if (state.running || section.dataset.state !== 'done') return;
  ui.save.disabled = true;
  state.worker.postMessage({ type: 'save' });
});
ui.resume.addEventListener('click', continueSaved);
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
