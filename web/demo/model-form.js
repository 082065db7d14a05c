// The real-model view's controls: the prompt form (Generate / Stop), the model picker, "Verify the labels",
// Save and "Continue saved conversation", each read and validated here and sent to the Worker through
// model-protocol.js; a new generation clears what the last one showed.
import { clearSpeed, drawText, scheduleDraw } from './model-drawing.js';
import { sendContinue, sendGenerate, sendReference, sendSave, startWorker, whenLoaded } from './model-protocol.js';
import { resetScores } from './model-scores.js';
import { saver, section, state, ui } from './model-state.js';
import { kvCacheDTypes } from '/dist/index.js';

/** The sampling controls, validated: { run: {greedy, temperature, topK, seed} } or { problem }. */
function readSampling() {
  const greedy = ui.sampling.value === 'greedy';
  const temperature = Number(ui.temperature.value);
  const topK = Number(ui.topK.value);
  const seed = Number(ui.seed.value);
  if (!greedy) {
    if (!(temperature >= 0.05 && temperature <= 2))
      return { problem: `Temperature: expected a number from 0.05 to 2, got “${ui.temperature.value}”.` };
    if (!Number.isInteger(topK) || topK < 1 || topK > 256)
      return { problem: `Top-k: expected a whole number from 1 to 256, got “${ui.topK.value}”.` };
    if (!Number.isInteger(seed) || seed < 0 || seed > 4294967295)
      return { problem: `Seed: expected a whole number from 0 to 4294967295, got “${ui.seed.value}”.` };
  }
  return { run: { greedy, temperature, topK, seed } };
}

/** The numbers matter only when sampling: greyed out for greedy. */
function syncSampling() {
  for (const input of [ui.temperature, ui.topK, ui.seed]) input.disabled = ui.sampling.value === 'greedy';
}

/** Generate (the prompt and "Bytes to generate" validated first), or Stop a running generation. */
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
  const sampling = readSampling();
  let problem = sampling.problem ?? '';
  if (bytes.length < 1) problem = 'Type a prompt of at least one character.';
  else if (bytes.length > 200) problem = `The prompt is ${bytes.length} bytes; at most 200 fit with room to generate.`;
  else if (!Number.isInteger(count) || count < 1 || bytes.length + count > nCtx)
    problem = `Bytes to generate: expected an integer from 1 to ${nCtx - bytes.length} (the context is ${nCtx} bytes, the prompt takes ${bytes.length}).`;
  ui.status.textContent = problem;
  if (problem) {
    section.dataset.state = 'invalid';
    return;
  }
  const run = { dtype: ui.cache.value, ...sampling.run };
  begin({ tokens: [...bytes], promptLength: bytes.length, run, restored: null });
  sendGenerate(bytes, count, run);
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
  ui.temperature.value = String(record.sampling.temperature);
  ui.topK.value = String(record.sampling.topK);
  ui.seed.value = String(record.sampling.seed);
  syncSampling();
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
  sendContinue(record, count, run);
}

function verify() {
  if (state.running || section.dataset.state === 'loading' || state.verifying) return;
  state.verifying = true;
  state.reference = {};
  ui.verify.disabled = true;
  section.dataset.reference = 'running';
  sendReference();
}

/** Another model: the last one's text, speed and rows do not describe it (Stop keeps them: same model). */
function pickModel() {
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
  clearSpeed();
  drawText();
  startWorker();
}

/** Wires every control of the view, and a Generate pressed while the model loads to its end. */
export function wireControls() {
  // Every cache dtype the package stores (its own list), float32 first: the models' caches take them all.
  const picked = ui.cache.value;
  ui.cache.replaceChildren(
    ...kvCacheDTypes.map((dtype) =>
      Object.assign(document.createElement('option'), { value: dtype, textContent: dtype }),
    ),
  );
  ui.cache.value = kvCacheDTypes.includes(picked) ? picked : kvCacheDTypes[0];
  whenLoaded(() => {
    if (state.pendingStart) {
      state.pendingStart = false;
      start();
    }
  });
  ui.verify.addEventListener('click', verify);
  ui.sampling.addEventListener('change', syncSampling);
  syncSampling();
  ui.picker.addEventListener('change', pickModel);
  ui.save.addEventListener('click', () => {
    if (state.running || section.dataset.state !== 'done') return;
    ui.save.disabled = true;
    sendSave();
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
}
