// The exactness checks and the timing panels, fed by a module Worker (worker.js) so that the page stays
// responsive while samples run. Every job gets a fresh Worker: its "first call" time is then a real first
// call, and a job made stale by new settings is ended by terminating its Worker.
import { $ } from './dom.js';
import { fmtDiff, fmtTime } from './format.js';

let worker = null;
let jobTimer = 0;
let jobCount = 0; // body[data-job]; the panels record the job they show in data-job when done

function resetWorkerPanels() {
  for (const id of ['exact-diff', 'ref-diff', 'split-ok']) $(id).textContent = '…';
  for (const id of ['exact-verdict', 'ref-verdict']) {
    $(id).textContent = '';
    $(id).className = 'verdict';
  }
  for (const id of ['t-wasm', 't-js', 't-speedup', 't-first']) $(id).textContent = '–';
  $('t-note').textContent = '';
  $('progress').value = 0;
  $('progress-text').textContent = 'starting…';
  $('timing').dataset.state = 'running';
  $('checks').dataset.state = 'running';
}

/**
 * Runs the checks and the timing of `job` ({ q, k, v, opts }) in a fresh worker.js, after 200 ms without a
 * newer job (typing restarts the wait), ending the one still running: its results would be stale.
 */
export function startJob(job) {
  clearTimeout(jobTimer);
  worker?.terminate();
  worker = null;
  resetWorkerPanels();
  job.id = String(++jobCount);
  document.body.dataset.job = job.id;
  jobTimer = setTimeout(() => {
    const w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
    worker = w;
    w.onmessage = (ev) => {
      if (w === worker) onWorkerMessage(ev.data, job);
    };
    w.onerror = (ev) => {
      ev.preventDefault();
      if (w === worker) onWorkerMessage({ type: 'error', message: ev.message || 'the worker failed to start' }, job);
    };
    w.postMessage({ q: job.q, k: job.k, v: job.v, opts: job.opts });
  }, 200);
}

function onWorkerMessage(msg, job) {
  if (msg.type === 'first') {
    $('t-first').textContent = fmtTime(msg.ms);
  } else if (msg.type === 'checks') {
    $('exact-diff').textContent = fmtDiff(msg.exactDiff);
    const exact = msg.exactDiff === 0 && msg.exactBits;
    $('exact-verdict').textContent = exact ? 'exact: bit-identical' : 'NOT exact';
    $('exact-verdict').className = `verdict ${exact ? 'ok' : 'bad'}`;
    $('ref-diff').textContent = fmtDiff(msg.refDiff);
    const fine = msg.refDiff < 1e-5;
    $('ref-verdict').textContent = fine ? (msg.refDiff === 0 ? 'equal' : 'float32 rounding') : 'larger than rounding';
    $('ref-verdict').className = `verdict ${fine ? 'ok' : 'bad'}`;
    $('split-ok').textContent = msg.splitOk ? 'yes' : 'NO';
    $('split-ok').className = msg.splitOk ? 'ok' : 'bad';
    $('checks').dataset.job = job.id;
    $('checks').dataset.state = 'done';
  } else if (msg.type === 'progress') {
    const phase = msg.phase === 'wasm' ? 0 : 1;
    $('progress').value = (phase + msg.done / msg.total) / 2;
    $('progress-text').textContent =
      `${msg.phase === 'wasm' ? 'mha-wasm' : 'plain JS'}: sample ${msg.done} of ${msg.total}`;
  } else if (msg.type === 'timing') {
    $('t-wasm').textContent = fmtTime(msg.wasm.median);
    $('t-js').textContent = fmtTime(msg.js.median);
    $('t-speedup').textContent = `${(msg.js.median / msg.wasm.median).toFixed(1)}×`;
    $('progress').value = 1;
    $('progress-text').textContent = 'done';
    const { batch: B, seqLen: S, dModel: D, mask, causal } = job.opts;
    // Two matmuls over the visible (query, key) pairs, 2 flops per multiply-add.
    let pairs = B * S * S;
    if (causal) pairs = (B * S * (S + 1)) / 2;
    else if (mask) pairs = mask.reduce((n, m) => n + (m ? 1 : 0), 0);
    const flops = 4 * pairs * D;
    $('t-note').textContent =
      `Medians of ${msg.wasm.samples} and ${msg.js.samples} samples (${msg.wasm.reps} and ${msg.js.reps} calls each) after warm-up; ` +
      `about ${(flops / (msg.wasm.median * 1e6)).toFixed(2)} GFLOP/s for mha-wasm (visible query-key pairs only). Same inputs, same mask, same output. ` +
      'Shared machines are noisy: read the ratio, not the absolute numbers.';
    $('timing').dataset.job = job.id;
    $('timing').dataset.state = 'done';
    worker?.terminate();
    worker = null;
  } else if (msg.type === 'error') {
    $('progress-text').textContent = `failed: ${msg.message}`;
    $('timing').dataset.job = job.id;
    $('timing').dataset.state = 'error';
  }
}
