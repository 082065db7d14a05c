// The real-model view's shared state and DOM handles, read and written by its modules: model-protocol.js
// (the Worker's messages), model-scores.js (live head scores), model-drawing.js (text, speed, heatmaps) and
// model-form.js (the controls). model-view.js is the entry that wires them.
//
// Shapes: L layers, H heads, S prompt bytes, T keys held (the context so far).
import { saveControls } from './real-model-save.js';

export const $ = (id) => document.getElementById(id);
export const section = $('real-model');
export const ui = {
  form: $('real-form'),
  prompt: $('real-prompt'),
  count: $('real-count'),
  cache: $('real-cache'),
  sampling: $('real-sampling'),
  temperature: $('real-temperature'),
  topK: $('real-topk'),
  seed: $('real-seed'),
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
export const saver = saveControls({ section, save: ui.save, resume: ui.resume, status: $('real-save-status') });

export const state = {
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

/** heads.json's entry of (layer, head): its labels and PyTorch's scores (undefined without heads.json). */
export const headInfo = (layer, head) => state.heads?.heads.find((e) => e.layer === layer && e.head === head);
