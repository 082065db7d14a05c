// The synthetic view's heatmaps: one canvas per head of mha.attentionWeights for the batch item picked,
// sized to the container's width (heatLayout), with a legend, a tooltip under the pointer and a keyboard
// cursor, so every cell can be read without a mouse. The options panel adds a sink column (the mass the sink
// takes per row), the window's band and the grouping of query heads that share a KV head.
import { $, el } from './dom.js';
import { MASKED_FILL, MASKED_HATCH, NAN_FILL, RAMP, headColor, rampColor } from './colors.js';
import { fmtWeight } from './format.js';
import { RECIPES } from './model.js';

// What the maps on the page show: the tooltip and the keyboard cursor read their cells from here.
const heat = { data: null };
const SINK_GAP = 6;
const BAND_COLOR = '#f97316';

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
function heatLayout(S, T, H, rowLabels, colLabels, containerWidth, sinkColumn) {
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

  // The sink column is one more cell, set off by a gap of SINK_GAP.
  const cells = T + (sinkColumn ? 1 : 0);
  const gapFor = sinkColumn ? SINK_GAP : 0;
  const fit = (left, right) => Math.floor((figureWidth - frame - left - right - gapFor) / cells);
  let cell = Math.min(22, fit(rowW, rise), Math.floor(420 / S));
  let labelled = cell >= 9;
  if (!labelled) cell = Math.min(22, fit(22, 4), Math.floor(420 / S));
  cell = Math.max(3, cell);
  labelled = labelled && cell >= 9;
  const left = labelled ? rowW : 22;
  const top = labelled ? rise + 10 : 16;
  const right = labelled ? Math.max(4, rise - Math.floor(cell / 2)) : 4;
  return {
    cell,
    cols,
    labelled,
    font: fontFor(cell),
    left,
    top,
    width: left + T * cell + (sinkColumn ? SINK_GAP + cell : 0) + right,
    sinkX: left + T * cell + SINK_GAP,
    height: top + S * cell + 4,
  };
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
  if (d.sinkMass) drawSinkColumn(ctx, h, L, S);
  if (d.window) drawWindowBand(ctx, L, S, T, d.window);

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
    const x = highlight.j === T ? L.sinkX : L.left + highlight.j * L.cell;
    ctx.strokeRect(x + 1, L.top + highlight.i * L.cell + 1, L.cell - 2, L.cell - 2);
  }
}

function drawSinkColumn(ctx, h, L, S) {
  const d = heat.data;
  for (let i = 0; i < S; i++) {
    const mass = d.sinkMass[h * S + i];
    ctx.fillStyle = Number.isNaN(mass) ? NAN_FILL : rampColor(mass / d.maxW);
    ctx.fillRect(L.sinkX, L.top + i * L.cell, L.cell, L.cell);
  }
  ctx.strokeStyle = '#cbd5e1';
  ctx.strokeRect(L.sinkX - 0.5, L.top - 0.5, L.cell + 1, S * L.cell + 1);
  ctx.save();
  ctx.fillStyle = '#7c2d12';
  ctx.font = '9px system-ui, sans-serif';
  ctx.textAlign = 'left';
  ctx.translate(L.sinkX + L.cell / 2 + 3, L.top - 4);
  ctx.rotate(-Math.PI / 4);
  ctx.fillText('sink', 0, 0);
  ctx.restore();
}

/** The window's band: on each row, a line at the first and past the last key the window lets through. */
function drawWindowBand(ctx, L, S, T, { bounds: [left, right], offset }) {
  ctx.strokeStyle = BAND_COLOR;
  ctx.lineWidth = 2;
  ctx.beginPath();
  for (let i = 0; i < S; i++) {
    const p = offset + i;
    const y = L.top + i * L.cell;
    for (const edge of [p - left, p + right + 1]) {
      if (edge <= 0 || edge >= T) continue;
      const x = L.left + edge * L.cell;
      ctx.moveTo(x, y);
      ctx.lineTo(x, y + L.cell);
    }
  }
  ctx.stroke();
  ctx.lineWidth = 1;
}

function renderLegend(maxW, clipped) {
  const digits = maxW < 0.1 ? 3 : 2;
  const ticks = [0, maxW / 2, maxW].map((w, i) =>
    el('span', {}, `${i === 2 && clipped ? '≥ ' : ''}${w.toFixed(digits)}`),
  );
  $('legend').replaceChildren(
    el(
      'div',
      { class: 'legend-scale' },
      el('span', { class: 'legend-title' }, 'weight'),
      el('div', {
        class: 'legend-bar',
        role: 'img',
        'aria-label': `color scale from 0 (light) to ${maxW.toFixed(3)} (dark), shared by all heads`,
        style: `background: linear-gradient(to right, ${RAMP.join(', ')})`,
      }),
      el('div', { class: 'legend-ticks' }, ...ticks),
    ),
    el('span', { class: 'legend-key' }, el('i', { class: 'swatch masked' }), 'masked'),
    el('span', { class: 'legend-key' }, el('i', { class: 'swatch nan' }), 'fully masked row (NaN)'),
  );
}

function tooltipText(h, i, j) {
  const d = heat.data;
  const q = `query ${i} “${d.rowLabels[i]}”`;
  if (j === d.T)
    return { head: `Head ${h}`, q, k: 'the sink', value: `sink takes ${fmtWeight(d.sinkMass[h * d.S + i])}` };
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
  tip.replaceChildren(
    el('strong', {}, t.head),
    el('span', {}, t.q),
    el('span', {}, `→ ${t.k}`),
    el('span', { class: 'tip-value' }, t.value),
  );
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
  const i = Math.floor((y - L.top) / L.cell);
  if (i < 0 || i >= heat.data.S) return null;
  if (heat.data.sinkMass && x >= L.sinkX && x < L.sinkX + L.cell) return { i, j: heat.data.T };
  const j = Math.floor((x - L.left) / L.cell);
  if (j < 0 || j >= heat.data.T) return null;
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
      j: Math.min(heat.data.sinkMass ? T : T - 1, Math.max(0, cursor.j + moves[ev.key][1])),
    };
    drawHeatmap(canvas, h, cursor);
    const rect = canvas.getBoundingClientRect();
    const sx = rect.width / L.width;
    showTooltip(
      h,
      cursor.i,
      cursor.j,
      rect.left + (cursor.j === T ? L.sinkX + L.cell : L.left + (cursor.j + 1) * L.cell) * sx,
      rect.top + (L.top + (cursor.i + 1) * L.cell) * sx,
    );
  });
  canvas.addEventListener('blur', () => {
    cursor = null;
    drawHeatmap(canvas, h, null);
    hideTooltip();
  });
}

/** One canvas per head for the batch item picked, a shared color scale and its legend. */
export function renderHeatmaps(state) {
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
  const sinkMass = state.sinks ? rowDeficits(weights, H * S, T) : null;
  const width = $('heatmaps').clientWidth;
  const layout = heatLayout(S, T, H, rowLabels, rowLabels, width || 300, sinkMass !== null);
  heat.renderedWidth = width;
  heat.data = {
    S,
    T,
    H,
    weights,
    maxW,
    nanRow,
    sinkMass,
    window: state.window,
    visible: visibleItem,
    rowLabels,
    colLabels: rowLabels,
    layout,
  };
  const group = H / (state.numKvHeads ?? H);

  const dpr = window.devicePixelRatio || 1;
  const figures = [];
  for (let h = 0; h < H; h++) {
    const canvas = el('canvas', {
      width: Math.round(layout.width * dpr),
      height: Math.round(layout.height * dpr),
      tabIndex: 0,
      role: 'img',
      'aria-label': `Head ${h}: attention weights, ${S} queries (rows) by ${T} keys (columns)${sinkMass ? ' and the sink' : ''}. Focus and use the arrow keys to read cells.`,
      'data-head': String(h),
      // plot geometry in CSS pixels, for tests and tools
      'data-left': String(layout.left),
      'data-top': String(layout.top),
      'data-cell': String(layout.cell),
    });
    canvas.style.width = `${layout.width}px`;
    canvas.style.aspectRatio = `${layout.width} / ${layout.height}`;
    drawHeatmap(canvas, h, null);
    attachHeatmapEvents(canvas, h);
    const recipe = cfg.source === 'sentence' ? RECIPES[h % RECIPES.length].label : null;
    const kvHead = Math.floor(h / group);
    figures.push(
      el(
        'figure',
        {
          class: group > 1 ? 'head grouped' : 'head',
          'data-kv-head': String(kvHead),
          style: group > 1 ? `border-color:${headColor(kvHead * group)}` : '',
        },
        el(
          'figcaption',
          {},
          el('i', { class: 'chip', style: `background:${headColor(h)}` }),
          el('strong', {}, `Head ${h}`),
          el('span', { class: 'cols' }, ` cols ${h * cfg.headDim}–${(h + 1) * cfg.headDim - 1}`),
          recipe ? el('span', { class: 'recipe' }, recipe) : null,
          group > 1
            ? el(
                'span',
                { class: 'kv-tag', style: `background:${headColor(kvHead * group, 92)}` },
                `KV head ${kvHead}: heads ${kvHead * group}–${(kvHead + 1) * group - 1} share its keys`,
              )
            : null,
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
    `. Shared color scale, 0 to ${maxW.toFixed(3)}${clipped ? ' (larger weights saturate)' : ''}. ` +
      (nan ? `${nan} fully masked row${nan > 1 ? 's' : ''}: NaN, as in PyTorch. ` : '') +
      (state.window ? 'Orange lines: the edges of the window. ' : '') +
      (sinkMass
        ? 'The column apart at the right: the mass the sink takes from each row (rows sum to 1 with it). '
        : '') +
      (group > 1
        ? `Heads framed in one color share one KV head (${H / group} KV heads); here a KV head is the keys of the ` +
          'first head of its group, so the other heads lose the keys their recipe was built for. '
        : '') +
      'Hover a cell, or focus a map and use the arrow keys.',
  );
}

/** 1 − Σ_j w[r, j] of each of `rows` rows of T weights: the mass the sink took (NaN for a NaN row). */
function rowDeficits(weights, rows, T) {
  const out = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let sum = 0;
    for (let j = 0; j < T; j++) sum += weights[r * T + j];
    out[r] = Number.isNaN(sum) ? NaN : Math.max(0, 1 - sum);
  }
  return out;
}

/** Keeps the maps fitted to their container; `currentRender()` is the state last drawn (null before any). */
export function redrawHeatmapsOnResize(currentRender) {
  // Heatmaps are sized to their container: redraw (without recomputing) when its width changes.
  // The observer's first callback, and any width the maps were already drawn at, redraw nothing:
  // a needless redraw replaces the canvases under the pointer (and under tests that hover them).
  let resizeTimer = 0;
  new ResizeObserver(() => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      const drawn = currentRender();
      if (drawn && $('heatmaps').clientWidth !== heat.renderedWidth) renderHeatmaps(drawn);
    }, 100);
  }).observe($('heatmaps'));
}
