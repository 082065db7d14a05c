// The mha-wasm demo page. Plain DOM + canvas, no framework.
// Flow: read controls -> validate (inline messages, never exceptions) -> build q/k/v and mask ->
// render heatmaps, split/merge diagram, strides and code from the main-thread instance -> hand the
// checks and timing to a fresh module Worker.
import { createMHA } from '/dist/index.js';
import {
  LIMITS,
  MASKS,
  PAD,
  RECIPES,
  batchItem,
  buildMask,
  randomQKV,
  sentenceQKV,
  splitMergeSteps,
  tokenize,
} from './model.js';
import { RAMP, rampColor } from './colors.js';

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'class') node.className = value;
    else if (key === 'style') node.style.cssText = value;
    else if (key.startsWith('data-') || key.startsWith('aria-') || key === 'role') node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
};

// ---------------------------------------------------------------------------------------------
// Colors.

const MASKED_FILL = '#e4e4e7';
const MASKED_HATCH = '#a1a1aa';
const NAN_FILL = '#3f3f46';

// One hue per head (cycled), used by the split/merge diagram and the heatmap captions.
const HEAD_HUES = [221, 330, 142, 25, 262, 188, 45, 0];
const headHue = (h) => HEAD_HUES[h % HEAD_HUES.length] + 11 * Math.floor(h / HEAD_HUES.length);
const headColor = (h, lightness = 48) => `hsl(${headHue(h)} 70% ${lightness}%)`;
/** A value-shaded cell color of head h: darker for large positive values, lighter for negative. */
const valueColor = (h, value) =>
  Number.isFinite(value) ? `hsl(${headHue(h)} 72% ${Math.round(55 - 22 * Math.tanh(value / 1.5))}%)` : NAN_FILL;

// ---------------------------------------------------------------------------------------------
// Formatting.

function fmtTime(ms) {
  if (!Number.isFinite(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toPrecision(3)} µs`;
  if (ms < 1000) return `${ms.toPrecision(3)} ms`;
  return `${(ms / 1000).toPrecision(3)} s`;
}
const fmtDiff = (d) => (d === 0 ? '0' : Number.isFinite(d) ? d.toExponential(2) : String(d));
const tuple = (xs) => `(${xs.join(', ')})`;
const fmtWeight = (w) => (w === 0 ? '0' : w < 1e-4 ? w.toExponential(2) : w.toFixed(4));

// ---------------------------------------------------------------------------------------------
// Settings and validation.

const controls = {
  source: () => document.querySelector('input[name="source"]:checked').value,
  sentence: $('sentence'),
  seed: $('seed'),
  batch: $('batch'),
  seqLen: $('seqLen'),
  dModel: $('dModel'),
  numHeads: $('numHeads'),
  mask: $('mask'),
  item: $('item'),
  token: $('token'),
};

const NAMES = { batch: 'Batch', seqLen: 'Sequence length', dModel: 'd_model', numHeads: 'Heads', seed: 'Seed' };

function readInt(field, [min, max], errors) {
  const raw = controls[field].value.trim();
  const name = NAMES[field];
  if (raw === '') {
    errors.push({ field, text: `${name} is empty: enter a whole number from ${min} to ${max}.` });
    return null;
  }
  const value = Number(raw);
  if (!Number.isInteger(value)) {
    errors.push({ field, text: `${name} must be a whole number, got “${raw}”.` });
    return null;
  }
  if (value < min || value > max) {
    errors.push({ field, text: `${name} must be between ${min} and ${max} in this demo, got ${value}.` });
    return null;
  }
  return value;
}

function divisorsNear(d, limit) {
  const out = [];
  for (let h = 1; h <= Math.min(d, limit); h++) if (d % h === 0) out.push(h);
  return out;
}

/** Reads and validates the controls. Returns { errors } or { cfg }. Never throws. */
function readSettings() {
  const errors = [];
  const source = controls.source();
  let lines = null;
  let batch;
  let seqLen;
  let seed = 0;
  if (source === 'sentence') {
    lines = tokenize(controls.sentence.value);
    if (lines.length === 0) errors.push({ field: 'sentence', text: 'Type at least one word.' });
    else if (lines.length > LIMITS.lines) {
      errors.push({ field: 'sentence', text: `Use at most ${LIMITS.lines} lines (batch items), got ${lines.length}.` });
    } else {
      const longest = Math.max(...lines.map((l) => l.length));
      if (longest > LIMITS.words) {
        errors.push({ field: 'sentence', text: `Keep each line to ${LIMITS.words} words or fewer, got ${longest}.` });
      }
      batch = lines.length;
      seqLen = longest;
    }
  } else {
    seed = readInt('seed', [0, 4294967295], errors);
    batch = readInt('batch', LIMITS.batch, errors);
    seqLen = readInt('seqLen', LIMITS.seqLen, errors);
  }
  const dModel = readInt('dModel', LIMITS.dModel, errors);
  const numHeads = readInt('numHeads', LIMITS.numHeads, errors);
  if (dModel !== null && numHeads !== null) {
    if (numHeads > dModel) {
      errors.push({ field: 'numHeads', text: `Heads (${numHeads}) cannot exceed d_model (${dModel}): each head needs at least one column.` });
    } else if (dModel % numHeads !== 0) {
      const lower = dModel - (dModel % numHeads);
      const options = divisorsNear(dModel, LIMITS.numHeads[1]).filter((h) => h > 1).slice(-6);
      errors.push({
        field: 'dModel',
        text:
          `d_model ${dModel} is not divisible by ${numHeads} heads (${dModel} % ${numHeads} = ${dModel % numHeads}), ` +
          `so the columns cannot be cut into equal head slices. Try d_model ${lower || numHeads} or ${lower + numHeads}` +
          (options.length ? `, or ${options.join(', ')} heads.` : '.'),
      });
    }
  }
  if (errors.length) return { errors };
  return { cfg: { source, lines, seed, batch, seqLen, dModel, numHeads, headDim: dModel / numHeads, mask: controls.mask.value } };
}

function showErrors(errors) {
  const box = $('errors');
  for (const name of ['sentence', 'seed', 'batch', 'seqLen', 'dModel', 'numHeads']) {
    controls[name].removeAttribute('aria-invalid');
  }
  box.replaceChildren();
  if (!errors.length) {
    box.hidden = true;
    document.body.classList.remove('stale');
    return;
  }
  for (const e of errors) controls[e.field]?.setAttribute('aria-invalid', 'true');
  box.append(el('strong', {}, 'Not computed: '), ...errors.map((e) => el('p', {}, e.text)));
  box.hidden = false;
  document.body.classList.add('stale');
}

// ---------------------------------------------------------------------------------------------
// Heatmaps.

const heat = { canvases: [], data: null };

function drawHatch(ctx, x, y, w, h) {
  ctx.fillStyle = MASKED_FILL;
  ctx.fillRect(x, y, w, h);
  if (w < 4) return;
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.strokeStyle = MASKED_HATCH;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let d = -h; d < w; d += 4) {
    ctx.moveTo(x + d, y + h);
    ctx.lineTo(x + d + h, y);
  }
  ctx.stroke();
  ctx.restore();
}

/**
 * Sizes the heatmap grid to the container: picks the column count (the fewest columns that still
 * need no more rows than the most that fit), then the largest cell that fills a column.
 */
function heatLayout(S, T, H, rowLabels, colLabels, containerWidth) {
  const gap = 14;
  const frame = 18; // figure padding + border
  const probe = document.createElement('canvas').getContext('2d');
  const fontFor = (cell) => `${Math.max(8, Math.min(11, cell - 1))}px system-ui, sans-serif`;
  probe.font = fontFor(12);
  const widest = (labels) => Math.max(...labels.map((l) => probe.measureText(l).width));
  const rowW = Math.min(78, Math.ceil(widest(rowLabels)) + 8);
  // Column labels are drawn at -45 degrees: they reach as far right of their cell as they rise.
  const rise = Math.ceil(Math.min(70, widest(colLabels)) * 0.71);

  const maxCols = Math.max(1, Math.min(H, Math.floor((containerWidth + gap) / (230 + gap))));
  const rows = Math.ceil(H / maxCols);
  let cols = maxCols;
  while (cols > 1 && Math.ceil(H / (cols - 1)) === rows) cols--;
  const figureWidth = (containerWidth - (cols - 1) * gap) / cols;

  const fit = (left, right) => Math.floor((figureWidth - frame - left - right) / T);
  let cell = Math.min(22, fit(rowW, rise), Math.floor(420 / S));
  let labelled = cell >= 9;
  if (!labelled) cell = Math.min(22, fit(22, 4), Math.floor(420 / S));
  cell = Math.max(3, cell);
  labelled = labelled && cell >= 9;
  const left = labelled ? rowW : 22;
  const top = labelled ? rise + 10 : 16;
  const right = labelled ? Math.max(4, rise - Math.floor(cell / 2)) : 4;
  return { cell, cols, labelled, font: fontFor(cell), left, top, width: left + T * cell + right, height: top + S * cell + 4 };
}

function drawHeatmap(canvas, h, highlight) {
  const d = heat.data;
  const { S, T, maxW, layout: L } = d;
  const dpr = window.devicePixelRatio || 1;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, L.width, L.height);
  const base = h * S * T;
  for (let i = 0; i < S; i++) {
    const y = L.top + i * L.cell;
    if (d.nanRow[i]) {
      ctx.fillStyle = NAN_FILL;
      ctx.fillRect(L.left, y, T * L.cell, L.cell);
      if (L.cell >= 9) {
        ctx.fillStyle = '#fafafa';
        ctx.font = `${Math.min(11, L.cell - 1)}px system-ui, sans-serif`;
        ctx.textBaseline = 'middle';
        ctx.textAlign = 'left';
        ctx.fillText('fully masked → NaN', L.left + 4, y + L.cell / 2 + 0.5);
      }
      continue;
    }
    for (let j = 0; j < T; j++) {
      const x = L.left + j * L.cell;
      if (!d.visible(i, j)) drawHatch(ctx, x, y, L.cell, L.cell);
      else {
        ctx.fillStyle = rampColor(d.weights[base + i * T + j] / maxW);
        ctx.fillRect(x, y, L.cell, L.cell);
      }
    }
  }
  // grid frame
  ctx.strokeStyle = '#cbd5e1';
  ctx.lineWidth = 1;
  ctx.strokeRect(L.left - 0.5, L.top - 0.5, T * L.cell + 1, S * L.cell + 1);

  // axis labels
  ctx.fillStyle = '#334155';
  ctx.font = L.labelled ? L.font : '9px system-ui, sans-serif';
  if (L.labelled) {
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i < S; i++) {
      ctx.fillStyle = d.nanRow[i] ? '#b91c1c' : '#334155';
      ctx.fillText(d.rowLabels[i], L.left - 5, L.top + i * L.cell + L.cell / 2 + 0.5, L.left - 6);
    }
    ctx.fillStyle = '#334155';
    ctx.textAlign = 'left';
    for (let j = 0; j < T; j++) {
      ctx.save();
      ctx.translate(L.left + j * L.cell + L.cell / 2 + 3, L.top - 4);
      ctx.rotate(-Math.PI / 4);
      ctx.fillText(d.colLabels[j], 0, 0, 70);
      ctx.restore();
    }
  } else {
    const step = Math.ceil(24 / L.cell);
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i < S; i += step) ctx.fillText(String(i), L.left - 3, L.top + i * L.cell + L.cell / 2);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'bottom';
    for (let j = 0; j < T; j += step) ctx.fillText(String(j), L.left + j * L.cell + L.cell / 2, L.top - 3);
  }
  if (highlight) {
    ctx.strokeStyle = '#f97316';
    ctx.lineWidth = 2;
    ctx.strokeRect(L.left + highlight.j * L.cell + 1, L.top + highlight.i * L.cell + 1, L.cell - 2, L.cell - 2);
  }
}

function renderLegend(maxW, clipped) {
  const digits = maxW < 0.1 ? 3 : 2;
  const ticks = [0, maxW / 2, maxW].map((w, i) => el('span', {}, `${i === 2 && clipped ? '≥ ' : ''}${w.toFixed(digits)}`));
  $('legend').replaceChildren(
    el('div', { class: 'legend-scale' },
      el('span', { class: 'legend-title' }, 'weight'),
      el('div', { class: 'legend-bar', role: 'img', 'aria-label': `color scale from 0 (light) to ${maxW.toFixed(3)} (dark), shared by all heads`, style: `background: linear-gradient(to right, ${RAMP.join(', ')})` }),
      el('div', { class: 'legend-ticks' }, ...ticks),
    ),
    el('span', { class: 'legend-key' }, el('i', { class: 'swatch masked' }), 'masked'),
    el('span', { class: 'legend-key' }, el('i', { class: 'swatch nan' }), 'fully masked row (NaN)'),
  );
}

function tooltipText(h, i, j) {
  const d = heat.data;
  const q = `query ${i} “${d.rowLabels[i]}”`;
  const k = `key ${j} “${d.colLabels[j]}”`;
  let value;
  if (d.nanRow[i]) value = 'every key is masked: this row is NaN';
  else if (!d.visible(i, j)) value = 'masked: not attended (weight 0)';
  else value = `weight ${fmtWeight(d.weights[h * d.S * d.T + i * d.T + j])}`;
  return { head: `Head ${h}`, q, k, value };
}

function showTooltip(h, i, j, x, y) {
  const tip = $('tooltip');
  const t = tooltipText(h, i, j);
  tip.replaceChildren(el('strong', {}, t.head), el('span', {}, t.q), el('span', {}, `→ ${t.k}`), el('span', { class: 'tip-value' }, t.value));
  tip.hidden = false;
  const pad = 14;
  const r = tip.getBoundingClientRect();
  let left = x + pad;
  let top = y + pad;
  if (left + r.width > window.innerWidth - 8) left = Math.max(8, x - r.width - pad);
  if (top + r.height > window.innerHeight - 8) top = Math.max(8, y - r.height - pad);
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

function hideTooltip() {
  $('tooltip').hidden = true;
}

function cellAt(canvas, clientX, clientY) {
  const L = heat.data.layout;
  const rect = canvas.getBoundingClientRect();
  const x = ((clientX - rect.left) * L.width) / rect.width;
  const y = ((clientY - rect.top) * L.height) / rect.height;
  const j = Math.floor((x - L.left) / L.cell);
  const i = Math.floor((y - L.top) / L.cell);
  if (i < 0 || j < 0 || i >= heat.data.S || j >= heat.data.T) return null;
  return { i, j };
}

function attachHeatmapEvents(canvas, h) {
  let cursor = null;
  canvas.addEventListener('mousemove', (ev) => {
    const c = cellAt(canvas, ev.clientX, ev.clientY);
    if (!c) return hideTooltip();
    showTooltip(h, c.i, c.j, ev.clientX, ev.clientY);
  });
  canvas.addEventListener('mouseleave', hideTooltip);
  canvas.addEventListener('keydown', (ev) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (ev.key === 'Escape') {
      cursor = null;
      drawHeatmap(canvas, h, null);
      return hideTooltip();
    }
    if (!moves[ev.key]) return;
    ev.preventDefault();
    const { S, T, layout: L } = heat.data;
    cursor = cursor ?? { i: 0, j: 0 };
    cursor = {
      i: Math.min(S - 1, Math.max(0, cursor.i + moves[ev.key][0])),
      j: Math.min(T - 1, Math.max(0, cursor.j + moves[ev.key][1])),
    };
    drawHeatmap(canvas, h, cursor);
    const rect = canvas.getBoundingClientRect();
    const sx = rect.width / L.width;
    showTooltip(h, cursor.i, cursor.j, rect.left + (L.left + (cursor.j + 1) * L.cell) * sx, rect.top + (L.top + (cursor.i + 1) * L.cell) * sx);
  });
  canvas.addEventListener('blur', () => {
    cursor = null;
    drawHeatmap(canvas, h, null);
    hideTooltip();
  });
}

function renderHeatmaps(state) {
  const { cfg, weights, rowLabels, visibleItem } = state;
  const S = cfg.seqLen;
  const T = cfg.seqLen;
  const H = cfg.numHeads;
  // Shared scale: 0 to the 99.5th percentile of all drawn weights, so one saturated row (a causal
  // row 0 has weight 1) does not wash out the rest; larger weights saturate and the legend says so.
  const finite = weights.filter((w) => w > 0);
  finite.sort();
  const trueMax = finite.length ? finite[finite.length - 1] : 0;
  let maxW = finite.length ? finite[Math.min(finite.length - 1, Math.floor(finite.length * 0.995))] : 1;
  if (!(maxW > 0)) maxW = 1;
  const clipped = trueMax > maxW * 1.0001;
  const nanRow = Array.from({ length: S }, (_, i) => Number.isNaN(weights[i * T]));
  const width = $('heatmaps').clientWidth;
  const layout = heatLayout(S, T, H, rowLabels, rowLabels, width || 300);
  heat.renderedWidth = width;
  heat.data = { S, T, H, weights, maxW, nanRow, visible: visibleItem, rowLabels, colLabels: rowLabels, layout };

  const dpr = window.devicePixelRatio || 1;
  const figures = [];
  heat.canvases = [];
  for (let h = 0; h < H; h++) {
    const canvas = el('canvas', {
      width: Math.round(layout.width * dpr),
      height: Math.round(layout.height * dpr),
      tabIndex: 0,
      role: 'img',
      'aria-label': `Head ${h}: attention weights, ${S} queries (rows) by ${T} keys (columns). Focus and use the arrow keys to read cells.`,
      'data-head': String(h),
      // plot geometry in CSS pixels, for tests and tools
      'data-left': String(layout.left),
      'data-top': String(layout.top),
      'data-cell': String(layout.cell),
    });
    canvas.style.width = `${layout.width}px`;
    canvas.style.aspectRatio = `${layout.width} / ${layout.height}`;
    heat.canvases.push(canvas);
    drawHeatmap(canvas, h, null);
    attachHeatmapEvents(canvas, h);
    const recipe = cfg.source === 'sentence' ? RECIPES[h % RECIPES.length].label : null;
    figures.push(
      el('figure', { class: 'head' },
        el('figcaption', {},
          el('i', { class: 'chip', style: `background:${headColor(h)}` }),
          el('strong', {}, `Head ${h}`),
          el('span', { class: 'cols' }, ` cols ${h * cfg.headDim}–${(h + 1) * cfg.headDim - 1}`),
          recipe ? el('span', { class: 'recipe' }, recipe) : null,
        ),
        canvas,
      ),
    );
  }
  $('heatmaps').replaceChildren(...figures);
  $('heatmaps').style.gridTemplateColumns = `repeat(${layout.cols}, minmax(0, 1fr))`;
  $('heatmaps').dataset.heads = String(H);
  renderLegend(maxW, clipped);
  const nan = nanRow.filter(Boolean).length;
  $('heat-sub').replaceChildren(
    `Batch item ${state.item}: rows are queries, columns are keys; each row sums to 1. From `,
    el('code', {}, 'mha.attentionWeights'),
    `. Shared color scale, 0 to ${maxW.toFixed(3)}${clipped ? ' (larger weights saturate)' : ''}. ` + (nan ? `${nan} fully masked row${nan > 1 ? 's' : ''}: NaN, as in PyTorch. ` : '') +
      'Hover a cell, or focus a map and use the arrow keys.',
  );
}

// ---------------------------------------------------------------------------------------------
// Split and merge diagram.

function strip(values, H, Dh, labelFor) {
  const segments = [];
  for (let h = 0; h < H; h++) {
    const cells = [];
    for (let e = 0; e < Dh; e++) cells.push(el('i', { style: `background:${valueColor(h, values[h * Dh + e])}` }));
    segments.push(
      el('span', { class: 'seg', style: `flex-grow:${Dh}; --head:${headColor(h)}`, title: labelFor(h), 'aria-label': labelFor(h), role: 'img' }, ...cells),
    );
  }
  const bar = el('div', { class: 'strip' }, ...segments);
  if (H > 8) return bar;
  // Column ranges under each head's run (only while they fit).
  const ticks = Array.from({ length: H }, (_, h) =>
    el('span', { style: `flex-grow:${Dh}; color:${headColor(h, 38)}` }, H <= 4 ? `h${h} · ${h * Dh}–${(h + 1) * Dh - 1}` : `h${h}`),
  );
  return el('div', { class: 'strip-wrap' }, bar, el('div', { class: 'strip-ticks', 'aria-hidden': 'true' }, ...ticks));
}

function miniMatrix(qh, h, S, Dh, t) {
  const px = Math.max(1, Math.min(10, Math.floor(120 / Math.max(S, Dh))));
  const canvas = el('canvas', { width: Dh * px, height: S * px, role: 'img', 'aria-label': `head ${h} of q after the transpose: ${S} rows by ${Dh} columns; row ${t} highlighted` });
  canvas.style.width = `${Dh * px}px`;
  const ctx = canvas.getContext('2d');
  for (let s = 0; s < S; s++) {
    for (let e = 0; e < Dh; e++) {
      ctx.globalAlpha = s === t ? 1 : 0.22;
      ctx.fillStyle = valueColor(h, qh[(h * S + s) * Dh + e]);
      ctx.fillRect(e * px, s * px, px, px);
    }
  }
  ctx.globalAlpha = 1;
  ctx.strokeStyle = '#0f172a';
  ctx.lineWidth = 1.5;
  ctx.strokeRect(0.75, t * px + 0.75, Dh * px - 1.5, px - 1.5);
  return canvas;
}

function renderSplitMerge(state) {
  const { cfg, qb, qh, outb, rowLabels, item, token: t } = state;
  const { seqLen: S, dModel: D, numHeads: H, headDim: Dh, batch: B } = cfg;
  const qRow = qb.subarray(t * D, (t + 1) * D);
  const outRow = outb.subarray(t * D, (t + 1) * D);
  const word = rowLabels[t];
  const tokenName = cfg.source === 'sentence' ? `token ${t} “${word}”` : `token ${t}`;

  // splitHeads really puts column h*Dh+e of row t at [h, t, e]: check it for the row drawn.
  let splitMatches = true;
  for (let h = 0; h < H; h++)
    for (let e = 0; e < Dh; e++)
      if (!Object.is(qh[(h * S + t) * Dh + e], qRow[h * Dh + e])) splitMatches = false;

  const heads = [];
  for (let h = 0; h < H; h++) {
    heads.push(
      el('div', { class: 'headbox', style: `--head:${headColor(h)}` },
        el('span', { class: 'headbox-title' }, `head ${h}`),
        miniMatrix(qh, h, S, Dh, t),
        el('span', { class: 'headbox-shape' }, `(S, Dh) = ${tuple([S, Dh])}`),
      ),
    );
  }
  const outNaN = Number.isNaN(outRow[0]);
  $('split-sub').replaceChildren(
    `Follow ${tokenName} of batch item ${item}. Its ${D} columns of q are cut into ${H} runs of ${Dh}; run h becomes row ${t} of head h's `,
    el('code', {}, `(S, Dh)`),
    ' matrix. Each head attends on its own, and the output row is stitched back in the same column order. Color = head, shade = value.',
  );
  $('splitmerge').replaceChildren(
    el('div', { class: 'sm-step' },
      el('div', { class: 'sm-label' }, el('code', {}, `q[${item}, ${t}, :]`), el('small', {}, `(D) = (${D})`)),
      strip(qRow, H, Dh, (h) => `head ${h}: columns ${h * Dh}–${(h + 1) * Dh - 1}`),
    ),
    el('div', { class: 'sm-arrow' }, el('span', {}, '↓ '), el('code', {}, `.view(${B}, ${S}, ${H}, ${Dh})`), ' then ', el('code', {}, '.transpose(1, 2)'),
      el('span', { class: 'sm-muted' }, ` → (B, H, S, Dh) = ${tuple([B, H, S, Dh])}`)),
    el('div', { class: 'sm-heads' }, ...heads),
    el('p', { class: `sm-check ${splitMatches ? 'ok' : 'bad'}` },
      splitMatches ? '✓ ' : '✗ ',
      el('code', {}, `mha.splitHeads(q)[${item}, h, ${t}, e]`), splitMatches ? ' equals ' : ' differs from ',
      el('code', {}, `q[${item}, ${t}, h·${Dh} + e]`), ' for every h, e of this row.'),
    el('div', { class: 'sm-arrow' }, el('span', {}, '↓ '), 'attention per head, then ', el('code', {}, '.transpose(1, 2).contiguous().view(B, S, D)')),
    el('div', { class: 'sm-step' },
      el('div', { class: 'sm-label' }, el('code', {}, `out[${item}, ${t}, :]`), el('small', {}, `(D) = (${D})`)),
      outNaN
        ? el('p', { class: 'sm-nan' }, 'This query row is fully masked: every output column is NaN.')
        : strip(outRow, H, Dh, (h) => `head ${h}'s output: columns ${h * Dh}–${(h + 1) * Dh - 1}`),
    ),
  );

  const tbody = $('strides').tBodies[0];
  tbody.replaceChildren(
    ...splitMergeSteps(B, S, D, H).map((step) =>
      el('tr', { class: step.contiguous ? '' : 'noncontig' },
        el('th', { scope: 'row' }, el('code', {}, step.op)),
        el('td', { 'data-label': 'shape' }, el('span', { class: 'letters' }, `(${step.letters})`), ` = ${tuple(step.shape)}`),
        el('td', { 'data-label': 'strides' }, el('code', {}, tuple(step.strides))),
        el('td', { 'data-label': 'memory' }, step.contiguous ? 'contiguous' : 'strided view', el('small', {}, ` · ${step.note}`)),
      ),
    ),
  );
  const start = item * S * D + t * D;
  $('offset-note').replaceChildren(
    'Element ', el('code', {}, 'q[b, s, h·Dh + e]'), ` sits at offset b·${S * D} + s·${D} + h·${Dh} + e, so head h of ${tokenName} starts at offset ${start} + h·${Dh}. `,
    'mha-wasm does not copy to split: its kernel reads each head in place with the transposed view\u2019s strides, and writes its output columns directly into the merged (B, S, D) result.',
  );
}

// ---------------------------------------------------------------------------------------------
// Code panel.

function renderCode(cfg, maskInfo) {
  const { batch: B, seqLen: S, dModel: D, numHeads: H, headDim: Dh } = cfg;
  const n = B * S * D;
  const lines = [
    "import { createMHA } from 'mha-wasm'; // on this server: '/dist/index.js'",
    '',
    'const mha = await createMHA();',
    `// mha.info: ${JSON.stringify(state.info ?? {}).replaceAll('"', '').replaceAll(':', ': ').replaceAll(',', ', ')}`,
    '',
    `// q, k, v: Float32Array (batch, seqLen, dModel) = (${B}, ${S}, ${D}), row-major: ${n} floats each`,
    `const n = ${B} * ${S} * ${D};`,
    'const q = Float32Array.from({ length: n }, () => Math.random() * 2 - 1); // your projected queries',
    'const k = Float32Array.from({ length: n }, () => Math.random() * 2 - 1);',
    'const v = Float32Array.from({ length: n }, () => Math.random() * 2 - 1);',
  ];
  const extra = [];
  if (cfg.mask === 'causal') extra.push('  causal: true, // query i sees keys 0..i');
  if (cfg.mask === 'padding') {
    lines.push(
      '',
      `// key padding: item b attends only to its first validLen[b] keys`,
      `const validLen = [${maskInfo.lengths.join(', ')}];`,
      `const mask = new Uint8Array(${B} * ${S} * ${S}); // (batch, seqLen, kvSeqLen), nonzero = may attend`,
      `for (let b = 0; b < ${B}; b++)`,
      `  for (let i = 0; i < ${S}; i++)`,
      `    for (let j = 0; j < validLen[b]; j++) mask[(b * ${S} + i) * ${S} + j] = 1;`,
    );
    extra.push('  mask,');
  }
  if (cfg.mask === 'random') {
    lines.push(
      '',
      `// (batch, seqLen, kvSeqLen), nonzero = may attend; a row with no visible key gives NaN`,
      `const mask = Uint8Array.from({ length: ${B} * ${S} * ${S} }, () => (Math.random() < 0.65 ? 1 : 0));`,
    );
    extra.push('  mask,');
  }
  const dims = `batch: ${B}, seqLen: ${S}, dModel: ${D}, numHeads: ${H}`;
  lines.push(
    '',
    'const out = mha.multiHeadAttention(q, k, v, {',
    `  ${dims}, // headDim = ${Dh}`,
    ...extra,
    '});',
    `// out: Float32Array(${n}), (batch, seqLen, dModel)`,
    '',
    `// the per-head softmax weights drawn above: (batch, numHeads, seqLen, kvSeqLen) = (${B}, ${H}, ${S}, ${S})`,
    `const weights = mha.attentionWeights(q, k, { ${dims}${extra.map((e) => `, ${e.trim().replace(/,.*$/, '')}`).join('')} });`,
  );
  $('code').textContent = lines.join('\n');
}

async function copyCode() {
  const text = $('code').textContent;
  const status = $('copy-status');
  try {
    await navigator.clipboard.writeText(text);
    status.textContent = 'Copied to the clipboard.';
  } catch {
    // No clipboard permission (e.g. an insecure origin): select the text for Ctrl-C instead.
    const range = document.createRange();
    range.selectNodeContents($('code'));
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    status.textContent = 'Clipboard not available here: the code is selected, press Ctrl-C (⌘-C).';
  }
  setTimeout(() => {
    if (status.textContent.startsWith('Copied')) status.textContent = '';
  }, 2500);
}

// ---------------------------------------------------------------------------------------------
// Worker: live checks and timing.

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

function startJob(job) {
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
    $('progress-text').textContent = `${msg.phase === 'wasm' ? 'mha-wasm' : 'plain JS'}: sample ${msg.done} of ${msg.total}`;
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

// ---------------------------------------------------------------------------------------------
// Main update.

let mha = null;
const state = { info: null };

function syncSourceControls() {
  const sentence = controls.source() === 'sentence';
  $('sentence-field').hidden = !sentence;
  $('seed-field').hidden = sentence;
  controls.batch.disabled = sentence;
  controls.seqLen.disabled = sentence;
}

function fillSelect(select, labels, keep) {
  const value = Number(select.value);
  select.replaceChildren(...labels.map((label, i) => el('option', { value: String(i) }, label)));
  select.value = String(keep && Number.isInteger(value) && value < labels.length ? value : 0);
}

let lastJobKey = '';
let lastRender = null;
let renderCount = 0; // body[data-renders]: lets tests wait for the render that follows a change

function update({ keepItem = true, rerun = false } = {}) {
  syncSourceControls();
  const { errors, cfg } = readSettings();
  showErrors(errors ?? []);
  if (!cfg) return;
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
    tokens.map((row, b) => (cfg.source === 'sentence' ? `item ${b}: ${row.filter((w) => w !== PAD).slice(0, 4).join(' ')}…` : `item ${b}`)),
    keepItem,
  );
  const item = Number(controls.item.value);
  fillSelect(controls.token, tokens[item].map((w, i) => (cfg.source === 'sentence' ? `${i}: ${w}` : `token ${i}`)), true);
  const token = Number(controls.token.value);

  const maskItem = maskInfo.options.mask ? batchItem(maskInfo.options.mask, item, S, S) : undefined;
  const itemOpts = { batch: 1, seqLen: S, dModel: D, numHeads: H, causal: cfg.mask === 'causal', ...(maskItem ? { mask: maskItem } : {}) };
  const qb = batchItem(data.q, item, S, D);
  const kb = batchItem(data.k, item, S, D);
  const vb = batchItem(data.v, item, S, D);
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
    causal: 'Query i sees keys 0..i only (the causal flag).',
    padding: `Item b sees only its first ${maskInfo.lengths?.join(' / ')} keys: a (B, S, T) mask, nonzero = attend.`,
    random: 'About 35% of (query, key) pairs hidden, and one query row per item fully hidden: its output is NaN.',
  }[cfg.mask];
  const mode = cfg.source === 'sentence' ? 'sentences' : `seeded random data (seed ${cfg.seed})`;
  const padNote = maskInfo.lengths ? `; valid lengths ${maskInfo.lengths.join(', ')}` : '';
  $('derived').textContent =
    `(B, S, D) = ${tuple([B, S, D])}, ${H} heads of Dh = ${cfg.headDim}; ${mode}; mask: ${MASKS[cfg.mask]}${padNote}.`;

  const st = { cfg, weights, qb, qh, outb, item, token, rowLabels: tokens[item], visibleItem: (i, j) => maskInfo.visible(item, i, j) };
  lastRender = st;
  renderHeatmaps(st);
  renderSplitMerge(st);
  renderCode(cfg, maskInfo);
  document.body.dataset.renders = String(++renderCount);
  document.body.dataset.ready = 'true';

  // Picking another item or token changes nothing the worker computes.
  const jobKey = JSON.stringify({ ...cfg, lines: cfg.lines });
  if (rerun || jobKey !== lastJobKey) {
    lastJobKey = jobKey;
    startJob({ q: data.q, k: data.k, v: data.v, opts: { batch: B, seqLen: S, dModel: D, numHeads: H, ...maskInfo.options } });
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
    $('build-info').textContent = `Could not load mha-wasm: ${error.message}. Run \`npm start\` from the repository (it builds dist/ first).`;
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
  for (const radio of document.querySelectorAll('input[name="source"]')) radio.addEventListener('change', () => update({ keepItem: false }));
  controls.mask.addEventListener('change', () => update());
  controls.item.addEventListener('change', () => update());
  controls.token.addEventListener('change', () => update());
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

  // Heatmaps are sized to their container: redraw (without recomputing) when its width changes.
  // The observer's first callback, and any width the maps were already drawn at, redraw nothing:
  // a needless redraw replaces the canvases under the pointer (and under tests that hover them).
  let resizeTimer = 0;
  new ResizeObserver(() => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (lastRender && $('heatmaps').clientWidth !== heat.renderedWidth) renderHeatmaps(lastRender);
    }, 100);
  }).observe($('heatmaps'));
  update();
}

main().catch((error) => {
  // Last resort: keep the failure on the page, not only in the console.
  $('build-info').textContent = `The demo failed: ${error.message}`;
  $('build-info').classList.add('bad');
});
