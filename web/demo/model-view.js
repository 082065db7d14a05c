// The demo's real-model view: tiny-gpt (models/tiny-gpt) or tiny-llama (models/tiny-llama) generating text
// byte by byte in a Worker (model-worker.js); for tiny-gpt, every layer x head's attention of the newest
// query drawn as one heatmap row, a head's full (S, T) pattern over the prompt on click, and the head labels
// of the training run backed by scores computed here. A finished conversation can be saved in IndexedDB
// (real-model-save.js) and, after a reload, continued from its KV caches without a prefill. Plain DOM + canvas.
//
// The entry of the view's modules: model-state.js (state and DOM handles), model-protocol.js (the Worker's
// messages), model-scores.js (live head scores), model-drawing.js (text, speed, heatmaps), model-form.js
// (the controls).
import { drawLegend } from './model-drawing.js';
import { wireControls } from './model-form.js';
import { startWorker } from './model-protocol.js';

drawLegend();
wireControls();
startWorker();
