// The cache view's entry: its controls (the dtypes and the integer arithmetic as the loaded package offers
// them), validation (inline, never an exception) and the panels: bytes held and the context that fits for
// named model shapes, the error against the float64 reference, the ring and the shared prefix.
import { createMHA, integerArithmeticDTypes, kvCacheDTypes } from '/dist/index.js';
import { $, el } from './dom.js';
import { fmtDiff } from './format.js';
import { bytesPerToken } from './cache-dtypes.js';
import { SHAPE, decode, errors, prefixRun, reference, ringRun, sequence } from './cache-runs.js';
import { drawErrorMap, drawRingMap, prefixBars } from './cache-drawing.js';

// KV shapes of named models: layers × KV heads × head size (their config.json files; tiny-llama's is
// models/tiny-llama/config.json).
const MODEL_SHAPES = [
  { name: 'tiny-llama (below)', layers: 4, kvHeads: 2, headDim: 32 },
  { name: 'Llama-3.2-1B', layers: 16, kvHeads: 8, headDim: 64 },
  { name: 'Llama-3.1-8B', layers: 32, kvHeads: 8, headDim: 128 },
];
const OWN_TOKENS = 8; // each sample's own tokens after the shared prompt

let mha = null;
let variants = []; // { dtype, arithmetic?, label }
let renders = 0; // #cache-view[data-renders]: lets tests wait for the render that follows a change

export const fmtBytes = (n) =>
  n < 1024
    ? `${n} B`
    : n < 1048576
      ? `${(n / 1024).toFixed(1)} KiB`
      : n < 1073741824
        ? `${(n / 1048576).toFixed(1)} MiB`
        : `${(n / 1073741824).toFixed(2)} GiB`;
const fmtCount = (n) => Math.floor(n).toLocaleString('en-US');
const dd = (term, value, attrs = {}) => el('div', {}, el('dt', {}, term), el('dd', attrs, value));
/** part / whole in percent, 2 digits (tiny shares as powers of ten): how large an error is for its values. */
function percentOf(part, whole) {
  if (!(whole > 0)) return '—';
  const p = (100 * part) / whole;
  return p === 0 ? '0 %' : p < 0.01 ? `${p.toExponential(1)} %` : `${p.toPrecision(2)} %`;
}
const maxDifference = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

function readInt(id, [min, max], name, problems) {
  const raw = $(id).value.trim();
  const value = Number(raw);
  $(id).removeAttribute('aria-invalid');
  if (raw === '' || !Number.isInteger(value) || value < min || value > max) {
    problems.push(`${name} must be a whole number from ${min} to ${max}, got “${raw}”.`);
    $(id).setAttribute('aria-invalid', 'true');
    return null;
  }
  return value;
}

/** The cache options of the controls: the dtype, and `arithmetic` only when 'integer' is picked. */
function pickedOptions() {
  const dtype = $('cache-dtype').value;
  const integer = !$('cache-arithmetic-field').hidden && $('cache-arithmetic').value === 'integer';
  return integer ? { dtype, arithmetic: 'integer' } : { dtype };
}

function syncArithmetic() {
  const dtype = $('cache-dtype').value;
  $('cache-arithmetic-field').hidden = !variants.some((v) => v.dtype === dtype && v.arithmetic);
}

function renderFit(dtypes) {
  const per = new Map(dtypes.map((d) => [d, MODEL_SHAPES.map((m) => bytesPerToken(mha, d, m.kvHeads, m.headDim))]));
  const picked = $('cache-dtype').value;
  $('cache-fit').replaceChildren(
    el('caption', {}, `Tokens of context whose cache fits in ${fmtBytes(mha.info.maxMemoryBytes)} of wasm memory`),
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        el('th', { scope: 'col' }, 'dtype'),
        ...MODEL_SHAPES.map((m) =>
          el('th', { scope: 'col' }, m.name, el('br'), el('small', {}, `${m.layers} × ${m.kvHeads} × ${m.headDim}`)),
        ),
      ),
    ),
    el(
      'tbody',
      {},
      ...dtypes.map((d) =>
        el(
          'tr',
          { class: d === picked ? 'picked' : '', 'data-dtype': d },
          el('th', { scope: 'row' }, d),
          ...MODEL_SHAPES.map((m, i) => {
            const perToken = m.layers * per.get(d)[i];
            return el(
              'td',
              { 'data-tokens': String(Math.floor(mha.info.maxMemoryBytes / perToken)) },
              fmtCount(mha.info.maxMemoryBytes / perToken),
              el('br'),
              el('small', {}, `${fmtBytes(perToken)}/token`),
            );
          }),
        ),
      ),
    ),
  );
  $('cache-fit-note').textContent =
    'Bytes per token are every layer’s K and V (scales included) as createKVCache allocates them, divided into ' +
    'mha.info.maxMemoryBytes, the most one instance’s memory can grow to: an upper bound, since the weights ' +
    'and activations need room too, and a browser may refuse a tab that much sooner.';
}

function update() {
  const problems = [];
  const N = readInt('cache-tokens', [2, 128], 'Tokens to decode', problems);
  const W = readInt('ring-window', [1, 32], 'The ring’s window', problems);
  const samples = readInt('prefix-samples', [1, 16], 'Samples', problems);
  const box = $('cache-errors');
  box.replaceChildren(...problems.map((p) => el('p', {}, p)));
  box.hidden = problems.length === 0;
  $('cache-view').classList.toggle('stale', problems.length > 0);
  if (problems.length) return;
  syncArithmetic();
  const picked = pickedOptions();
  const dtypes = [...new Set(variants.map((v) => v.dtype))];

  const seq = sequence(N);
  const ref = reference(seq);
  const runs = variants.map((v) => {
    const options = v.arithmetic ? { dtype: v.dtype, arithmetic: v.arithmetic } : { dtype: v.dtype };
    const run = decode(mha, seq, options);
    return { ...v, run, error: errors(run, ref, N) };
  });
  const current = runs.find((r) => r.dtype === picked.dtype && (r.arithmetic ?? null) === (picked.arithmetic ?? null));
  const float32 = runs.find((r) => r.dtype === 'float32');
  // Integer arithmetic: the same dtype's float arithmetic run, to show what the integer rounding alone adds.
  const floatTwin = current.arithmetic ? runs.find((r) => r.dtype === current.dtype && !r.arithmetic) : null;

  $('cache-bytes').replaceChildren(
    dd('this cache, ' + `${N} tokens of ${SHAPE.HKV} KV heads × ${SHAPE.DH}`, fmtBytes(current.run.bytes), {
      id: 'cache-bytes-held',
      'data-value': String(current.run.bytes),
    }),
    dd('per token, per layer', fmtBytes(bytesPerToken(mha, picked.dtype, SHAPE.HKV, SHAPE.DH))),
    dd('compared with float32', `${((100 * current.run.bytes) / float32.run.bytes).toFixed(1)}%`),
  );
  renderFit(dtypes);

  $('cache-error').replaceChildren(
    dd('weights, max |Δ|', fmtDiff(current.error.weights), {
      id: 'cache-weights-error',
      'data-value': String(current.error.weights),
    }),
    dd('output, max |Δ|', fmtDiff(current.error.out), {
      id: 'cache-out-error',
      'data-value': String(current.error.out),
    }),
    dd(
      `output, max |Δ| over its largest |value| (${current.error.outMax.toFixed(2)})`,
      percentOf(current.error.out, current.error.outMax),
      { id: 'cache-out-relative' },
    ),
    ...(floatTwin
      ? [
          dd('output against float arithmetic, max |Δ|', fmtDiff(maxDifference(current.run.out, floatTwin.run.out)), {
            id: 'cache-integer-vs-float',
          }),
        ]
      : []),
  );
  drawErrorMap($('cache-error-map'), current.error.map, N, current.error.weights);
  $('cache-error-note').textContent =
    `${current.label}: the map is each (query step, key) weight’s largest error over the ${SHAPE.H} heads, white 0 to ` +
    `darkest ${fmtDiff(current.error.weights)} (this dtype’s own scale; grey: a future key). Weights: ` +
    'mha.attentionWeights over the keys as the cache holds them (cache.read()); output: what attend returned.' +
    (current.arithmetic ? ' Integer arithmetic also rounds the queries, which only the output’s error includes.' : '');
  $('cache-compare').replaceChildren(
    el('caption', {}, 'Every dtype on the same sequence'),
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        ...['cache', 'bytes held', 'weights max |Δ|', 'output max |Δ|', 'of the largest |output|'].map((h) =>
          el('th', { scope: 'col' }, h),
        ),
      ),
    ),
    el(
      'tbody',
      {},
      ...runs.map((r) =>
        el(
          'tr',
          { class: r === current ? 'picked' : '' },
          el('th', { scope: 'row' }, r.label),
          el('td', {}, fmtBytes(r.run.bytes)),
          el('td', {}, fmtDiff(r.error.weights)),
          el('td', {}, fmtDiff(r.error.out)),
          el('td', {}, percentOf(r.error.out, r.error.outMax)),
        ),
      ),
    ),
  );

  const ring = ringRun(mha, seq, W, picked.dtype);
  drawRingMap($('ring-map'), ring.held, N);
  const last = ring.held[N - 1];
  $('ring-stats').replaceChildren(
    dd(`held after ${last.to} tokens (cache.stored)`, `${last.to - last.from}: ${last.from}–${last.to - 1}`, {
      id: 'ring-held',
    }),
    dd('bytes, ring vs every token', `${fmtBytes(ring.ringBytes)} vs ${fmtBytes(ring.fullBytes)}`),
    dd('output vs a full cache with the same window, max |Δ| (float32 rounding)', fmtDiff(ring.difference), {
      id: 'ring-difference',
      'data-value': String(ring.difference),
    }),
  );

  const prefix = prefixRun(mha, seq, samples, OWN_TOKENS, picked.dtype);
  prefixBars($('prefix-bars'), prefix, samples, fmtBytes);
  $('prefix-stats').replaceChildren(
    dd(
      `bytes held: prefix of ${N} tokens + ${samples} × ${OWN_TOKENS} own`,
      fmtBytes(prefix.prefixBytes + prefix.sharedBytes),
      { id: 'prefix-shared-bytes', 'data-value': String(prefix.prefixBytes + prefix.sharedBytes) },
    ),
    dd(`${samples} copies of ${N} + ${OWN_TOKENS} tokens`, fmtBytes(prefix.copiesBytes), {
      id: 'prefix-copies-bytes',
      'data-value': String(prefix.copiesBytes),
    }),
    dd('outputs, shared vs copies, max |Δ| (float32 rounding)', fmtDiff(prefix.difference), {
      id: 'prefix-difference',
      'data-value': String(prefix.difference),
    }),
  );
  $('cache-view').dataset.renders = String(++renders);
}

async function main() {
  mha = await createMHA();
  const dtypes = kvCacheDTypes; // the package's own list: a dtype added to its table shows up here
  variants = dtypes.flatMap((dtype) => {
    const plain = { dtype, label: dtype };
    return integerArithmeticDTypes.includes(dtype)
      ? [plain, { dtype, arithmetic: 'integer', label: `${dtype}, integer arithmetic` }]
      : [plain];
  });
  $('cache-dtype').replaceChildren(...dtypes.map((d) => el('option', { value: d }, d)));
  $('cache-dtype').value = dtypes.includes('int8') ? 'int8' : dtypes[0];
  let timer = 0;
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(update, 200);
  };
  for (const id of ['cache-dtype', 'cache-arithmetic']) $(id).addEventListener('change', update);
  for (const id of ['cache-tokens', 'ring-window', 'prefix-samples']) $(id).addEventListener('input', later);
  $('cache-form').addEventListener('submit', (ev) => ev.preventDefault());
  update();
  $('cache-view').dataset.state = 'ready';
}

main().catch((error) => {
  // Keep the failure on the page, not only in the console.
  const box = $('cache-errors');
  box.replaceChildren(el('p', {}, `The cache view failed: ${error.message}`));
  box.hidden = false;
  $('cache-view').dataset.state = 'failed';
});
