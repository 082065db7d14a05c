// The mha-wasm demo page. Plain DOM + canvas, no framework.
// Flow: read controls -> validate (inline messages, never exceptions) -> build q/k/v and mask ->
// render heatmaps, split/merge diagram, strides and code from the main-thread instance -> hand the
// checks and timing to a fresh module Worker.
import { createMHA } from '/dist/index.js';
import { MASKS, PAD, batchItem, buildMask, randomQKV, sentenceQKV } from './model.js';
import { $, el } from './dom.js';
import { tuple } from './format.js';
import { controls, fillSelect, readSettings, showErrors, syncSourceControls } from './settings.js';
import { redrawHeatmapsOnResize, renderHeatmaps } from './heatmaps.js';
import { renderSplitMerge } from './split-merge.js';
import { copyCode, renderCode } from './code-panel.js';
import { startJob } from './checks-and-timing.js';
import {
  TYPED_FIELDS,
  codeLines,
  describeModern,
  kvHeadsOf,
  libraryOptions,
  modernControls,
  readModernOptions,
  syncKvHeads,
  visibleWith,
} from './modern-options.js';
import { renderRopeChart, renderStages, syncStageHeads } from './stage-view.js';

let mha = null;
const state = { info: null };
let lastJobKey = '';
let lastRender = null;
let renderCount = 0; // body[data-renders]: lets tests wait for the render that follows a change

function update({ keepItem = true, rerun = false } = {}) {
  syncSourceControls();
  const { errors: settingErrors, cfg } = readSettings();
  const errors = settingErrors ?? [];
  if (cfg) syncKvHeads(cfg.numHeads);
  const modern = readModernOptions(cfg?.numHeads ?? 1, errors);
  showErrors(errors);
  if (!cfg || errors.length) return;
  if (cfg.source === 'sentence') {
    controls.batch.value = String(cfg.batch);
    controls.seqLen.value = String(cfg.seqLen);
  }
  const { batch: B, seqLen: S, dModel: D, numHeads: H } = cfg;

  let data;
  let tokens;
  let lengths = null;
  if (cfg.source === 'sentence') {
    data = sentenceQKV(cfg.lines, D, H);
    tokens = data.tokens;
    lengths = data.lengths;
  } else {
    data = randomQKV(B, S, D, cfg.seed);
    tokens = Array.from({ length: B }, () => Array.from({ length: S }, (_, i) => String(i)));
  }
  const maskInfo = buildMask(cfg.mask, B, S, { lengths, seed: cfg.seed + 1 });

  fillSelect(
    controls.item,
    tokens.map((row, b) =>
      cfg.source === 'sentence'
        ? `item ${b}: ${row
            .filter((w) => w !== PAD)
            .slice(0, 4)
            .join(' ')}…`
        : `item ${b}`,
    ),
    keepItem,
  );
  const item = Number(controls.item.value);
  fillSelect(
    controls.token,
    tokens[item].map((w, i) => (cfg.source === 'sentence' ? `${i}: ${w}` : `token ${i}`)),
    true,
  );
  const token = Number(controls.token.value);

  const maskItem = maskInfo.options.mask ? batchItem(maskInfo.options.mask, item, S, S) : undefined;
  const causal = cfg.mask === 'causal';
  const itemOpts = {
    batch: 1,
    seqLen: S,
    dModel: D,
    numHeads: H,
    causal,
    ...(maskItem ? { mask: maskItem } : {}),
    ...libraryOptions(modern, { seqLen: S, numHeads: H, headDim: cfg.headDim }, mha),
  };
  const qb = batchItem(data.q, item, S, D);
  const kb = kvHeadsOf(batchItem(data.k, item, S, D), S, D, H, modern.numKvHeads);
  const vb = kvHeadsOf(batchItem(data.v, item, S, D), S, D, H, modern.numKvHeads);
  let weights;
  let outb;
  let qh;
  try {
    weights = mha.attentionWeights(qb, kb, itemOpts);
    outb = mha.multiHeadAttention(qb, kb, vb, itemOpts);
    qh = mha.splitHeads(qb, { batch: 1, seqLen: S, dModel: D, numHeads: H });
  } catch (error) {
    // The controls are validated first, so this means the library refused something unexpected.
    showErrors([{ field: null, text: `mha-wasm refused these settings: ${error.message}` }]);
    return;
  }

  $('mask-help').textContent = {
    none: 'Every query sees every key.',
    causal: modern.queryOffset
      ? `Query i sees keys 0..i + ${modern.queryOffset} only (the causal flag, counted from the query offset).`
      : 'Query i sees keys 0..i only (the causal flag).',
    padding: `Item b sees only its first ${maskInfo.lengths?.join(' / ')} keys: a (B, S, T) mask, nonzero = attend.`,
    random: 'About 35% of (query, key) pairs hidden, and one query row per item fully hidden: its output is NaN.',
  }[cfg.mask];
  const mode = cfg.source === 'sentence' ? 'sentences' : `seeded random data (seed ${cfg.seed})`;
  const padNote = maskInfo.lengths ? `; valid lengths ${maskInfo.lengths.join(', ')}` : '';
  $('derived').textContent =
    `(B, S, D) = ${tuple([B, S, D])}, ${H} heads of Dh = ${cfg.headDim}; ${mode}; mask: ${MASKS[cfg.mask]}${padNote}.` +
    describeModern(modern, H);

  const st = {
    cfg,
    weights,
    qb,
    qh,
    outb,
    item,
    token,
    rowLabels: tokens[item],
    visibleItem: visibleWith(modern, causal, (i, j) => causal || maskInfo.visible(item, i, j)),
    window: modern.window ? { bounds: modern.window, offset: modern.queryOffset } : null,
    sinks: itemOpts.sinks !== undefined,
    numKvHeads: modern.numKvHeads,
  };
  lastRender = st;
  renderHeatmaps(st);
  syncStageHeads(H);
  const stageHead = Number($('stageHead').value);
  renderStages(mha, { q: qb, k: kb, options: itemOpts, token, head: stageHead, labels: tokens[item] });
  const group = H / modern.numKvHeads;
  const kvHead = Math.floor(stageHead / group);
  const keyRow = kb.subarray(
    (token * modern.numKvHeads + kvHead) * cfg.headDim,
    (token * modern.numKvHeads + kvHead + 1) * cfg.headDim,
  );
  renderRopeChart(mha, {
    x: keyRow,
    theta: modern.chartTheta,
    enabled: modern.ropeTheta !== null,
    word: tokens[item][token],
  });
  renderSplitMerge(st);
  renderCode(cfg, maskInfo, state.info, {
    optionLines: codeLines(modern, { seqLen: S, numHeads: H, headDim: cfg.headDim }),
    kvWidth: modern.numKvHeads * cfg.headDim,
  });
  document.body.dataset.renders = String(++renderCount);
  document.body.dataset.ready = 'true';

  // Picking another item or token changes nothing the worker computes.
  const jobKey = JSON.stringify({ ...cfg, lines: cfg.lines });
  if (rerun || jobKey !== lastJobKey) {
    lastJobKey = jobKey;
    startJob({
      q: data.q,
      k: data.k,
      v: data.v,
      opts: { batch: B, seqLen: S, dModel: D, numHeads: H, ...maskInfo.options },
    });
  }
}

let inputTimer = 0;
function scheduleUpdate(delay = 150) {
  clearTimeout(inputTimer);
  inputTimer = setTimeout(() => update(), delay);
}

async function main() {
  const isolated = window.crossOriginIsolated === true;
  $('isolated').textContent = isolated ? 'the page is cross-origin isolated' : 'the page is NOT cross-origin isolated';
  try {
    mha = await createMHA();
  } catch (error) {
    $('build-info').textContent =
      `Could not load mha-wasm: ${error.message}. Run \`npm start\` from the repository (it builds dist/ first).`;
    $('build-info').classList.add('bad');
    return;
  }
  state.info = { ...mha.info };
  const { version, simd, threads } = mha.info;
  $('hero-version').textContent = `v${version}`;
  $('build-info').replaceChildren(
    el('span', { class: 'pill' }, `v${version}`),
    el('span', { class: `pill ${simd ? 'on' : ''}` }, simd ? 'SIMD128 on' : 'scalar build (no SIMD)'),
    el('span', { class: 'pill' }, `${threads} thread${threads === 1 ? '' : 's'}`),
    el('span', { class: `pill ${isolated ? 'on' : ''}` }, isolated ? 'cross-origin isolated' : 'not isolated'),
  );

  const form = $('controls');
  form.addEventListener('submit', (ev) => ev.preventDefault());
  for (const name of ['sentence', 'seed', 'batch', 'seqLen', 'dModel', 'numHeads']) {
    controls[name].addEventListener('input', () => scheduleUpdate(name === 'sentence' ? 300 : 150));
  }
  for (const radio of document.querySelectorAll('input[name="source"]'))
    radio.addEventListener('change', () => update({ keepItem: false }));
  controls.mask.addEventListener('change', () => update());
  controls.item.addEventListener('change', () => update());
  controls.token.addEventListener('change', () => update());
  for (const name of TYPED_FIELDS) modernControls[name].addEventListener('input', () => scheduleUpdate());
  for (const name of ['numKvHeads', 'alibi', 'rope']) modernControls[name].addEventListener('change', () => update());
  $('stageHead').addEventListener('change', () => update());
  $('rerun').addEventListener('click', () => update({ rerun: true }));
  $('copy').addEventListener('click', copyCode);
  $('preset-large').addEventListener('click', () => {
    document.querySelector('input[name="source"][value="random"]').checked = true;
    Object.assign(controls.batch, { value: '4' });
    Object.assign(controls.seqLen, { value: '128' });
    Object.assign(controls.dModel, { value: '512' });
    Object.assign(controls.numHeads, { value: '8' });
    update({ keepItem: false });
  });

  redrawHeatmapsOnResize(() => lastRender);
  update();
}

main().catch((error) => {
  // Last resort: keep the failure on the page, not only in the console.
  $('build-info').textContent = `The demo failed: ${error.message}`;
  $('build-info').classList.add('bad');
});
