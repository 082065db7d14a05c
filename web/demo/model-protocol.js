// The real-model view's side of the Worker protocol (model-worker.js documents every message): starting a
// Worker for the picked model, the messages sent to it, and one handler per message received, which update
// model-state.js and ask model-drawing.js for a frame.
//
// Shapes: L layers, H heads, S prompt bytes, T keys held (the context so far).
import { buildHeadRows, scheduleDraw } from './model-drawing.js';
import { addScores } from './model-scores.js';
import { saver, section, state, ui } from './model-state.js';

const TITLES = {
  'tiny-gpt': 'A real model: tiny-gpt writes, and you watch its heads',
  'tiny-llama': 'A real model: tiny-llama writes, from a KV cache you can save',
};
let onLoaded = () => {};

/** Sets what runs once a Worker has loaded its model (a Generate pressed while it loaded). */
export function whenLoaded(fn) {
  onLoaded = fn;
}

/** A fresh Worker for the picked model (the last one terminated); the view shows it loading. */
export function startWorker() {
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
  state.worker = new Worker(new URL('./model-worker.js', import.meta.url), { type: 'module' });
  state.worker.onmessage = ({ data }) => HANDLERS.get(data.type)?.(data);
  state.worker.onerror = (e) => fail(e.message || 'the model worker failed to start');
  state.verifying = false;
  ui.verify.disabled = false;
  section.dataset.state = 'loading';
  ui.run.disabled = true;
  ui.status.textContent = `Loading ${state.model} (5.8 MB of weights, cached by the browser after the first visit)…`;
  state.worker.postMessage({ type: 'load', model: state.model });
}

// ---------------------------------------------------------------------------------------------
// To the Worker.

/** A fresh generation of count bytes after prompt (bytes), with run's cache dtype and sampling. */
export const sendGenerate = (prompt, count, run) =>
  state.worker.postMessage({ type: 'generate', prompt, count, ...run });

/** A saved conversation restored (no prefill), then count bytes generated on from its pending byte. */
export const sendContinue = (record, count, run) =>
  state.worker.postMessage({
    type: 'continue',
    state: { tokens: record.tokens, caches: record.caches },
    pending: record.pending,
    count,
    ...run,
    drawn: record.generated,
  });

/** The last generation's state, answered by a 'state' message. */
export const sendSave = () => state.worker.postMessage({ type: 'save' });

/** heads.json's scores recomputed in the Worker, answered by two 'reference' messages. */
export const sendReference = () => state.worker.postMessage({ type: 'reference' });

// ---------------------------------------------------------------------------------------------
// From the Worker: one handler per message type.

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

function loaded(data) {
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
  buildHeadRows();
  section.dataset.state = 'ready';
  ui.run.disabled = false;
  onLoaded();
  const model = data.model;
  saver.refresh(model).then(() => {
    if (model === state.model) section.dataset.savedChecked = model;
  });
}

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

function restored(data) {
  state.restored = { tokens: data.tokens, ms: data.ms };
  section.dataset.restoredTokens = String(data.tokens);
  saver.say(
    `Restored ${data.tokens} tokens from IndexedDB in ${data.ms.toFixed(1)} ms (mha.loadKVCache per layer), no prefill; generating on from the last byte.`,
  );
}

function reference(data) {
  state.reference[data.name] = data.scores;
  section.dataset.reference = data.name;
  if (data.name === 'induction') {
    state.verifying = false;
    ui.verify.disabled = false;
  }
  scheduleDraw(true);
}

function prefill(data) {
  state.prefillWeights = data.weights;
  state.prefillTiming = data.timing;
  const S = data.tokens.length;
  if (data.weights)
    for (let layer = 0; layer < state.dims.layers; layer++) addScores(layer, data.weights[layer], S, S, 0);
  scheduleDraw(true);
}

function token(data) {
  const T = data.kvLength;
  // The first token's row is the prompt's last prefill row, counted above; later rows are new queries.
  if (data.rows && state.tokens.length > state.promptLength)
    for (let layer = 0; layer < state.dims.layers; layer++) addScores(layer, data.rows[layer], 1, T, T - 1);
  state.tokens.push(data.token);
  Object.assign(state, { rows: data.rows, kvLength: T, timing: data.timing });
  section.dataset.generated = String(state.tokens.length - state.promptLength);
  scheduleDraw(false);
}

function done(data) {
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

const HANDLERS = new Map(
  Object.entries({
    error: (data) => fail(data.message),
    loaded,
    state: storeState,
    restored,
    reference,
    prefill,
    token,
    done,
  }),
);
