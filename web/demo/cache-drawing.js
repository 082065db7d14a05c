// The cache view's pictures: the map of the weights' error, the ring's held tokens over the decode steps and
// the bars of the bytes a shared prefix saves. Each canvas is sized to its container, in CSS pixels × dpr.
import { el, prepareCanvas } from './dom.js';
import { MASKED_FILL, rampColor } from './colors.js';

/** A canvas of `width` × `height` CSS pixels, cleared to white, in the pictures' font; returns its 2D context. */
function prepare(canvas, width, height) {
  const ctx = prepareCanvas(canvas, width, height);
  ctx.font = '10px system-ui, sans-serif';
  return ctx;
}

const AXIS = { left: 30, top: 16, right: 6, bottom: 6 };

/** Axis ticks every `step` cells along both sides of an N × M grid at `cell` px. */
function ticks(ctx, rows, cols, cell, step) {
  ctx.fillStyle = '#334155';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i < rows; i += step) ctx.fillText(String(i), AXIS.left - 3, AXIS.top + (i + 0.5) * cell);
  ctx.textAlign = 'center';
  ctx.textBaseline = 'bottom';
  for (let j = 0; j < cols; j += step) ctx.fillText(String(j), AXIS.left + (j + 0.5) * cell, AXIS.top - 2);
}

/**
 * The (N, N) map of the largest weight error over the heads: query steps down, keys across; white = 0, the
 * darkest = the largest error of this dtype (the scale is the dtype's own: the note says its maximum).
 */
export function drawErrorMap(canvas, map, N, maxError) {
  const cell = Math.max(3, Math.min(10, Math.floor((canvas.parentElement.clientWidth - AXIS.left - AXIS.right) / N)));
  const ctx = prepare(canvas, AXIS.left + N * cell + AXIS.right, AXIS.top + N * cell + AXIS.bottom);
  for (let i = 0; i < N; i++)
    for (let j = 0; j < N; j++) {
      ctx.fillStyle = j > i ? MASKED_FILL : maxError > 0 ? rampColor(map[i * N + j] / maxError) : rampColor(0);
      ctx.fillRect(AXIS.left + j * cell, AXIS.top + i * cell, cell, cell);
    }
  ticks(ctx, N, N, cell, Math.ceil(20 / cell));
  canvas.dataset.cell = String(cell);
}

/**
 * The ring beside a cache that holds every token: for each decode step (a column) the token positions (rows)
 * held: light grey, what a full cache holds; blue, what the ring still holds (darker = newer); orange, the
 * token written at that step; a red dash, the token the ring overwrote.
 */
export function drawRingMap(canvas, held, N) {
  const cell = Math.max(3, Math.min(7, Math.floor((canvas.parentElement.clientWidth - AXIS.left - AXIS.right) / N)));
  const ctx = prepare(canvas, AXIS.left + N * cell + AXIS.right, AXIS.top + N * cell + AXIS.bottom);
  held.forEach(({ from, to }, step) => {
    const x = AXIS.left + step * cell;
    for (let p = 0; p <= step; p++) {
      const y = AXIS.top + p * cell;
      if (p === to - 1) ctx.fillStyle = '#f97316';
      else if (p >= from) ctx.fillStyle = rampColor(0.35 + (0.6 * (p - from + 1)) / Math.max(1, to - from));
      else ctx.fillStyle = '#eef0f3';
      ctx.fillRect(x, y, cell, cell);
    }
    const evicted = step > 0 ? held[step - 1].from : 0;
    if (from > evicted) {
      ctx.fillStyle = '#b91c1c';
      ctx.fillRect(x, AXIS.top + (from - 1) * cell + cell / 2 - 1, cell, 2);
    }
  });
  ticks(ctx, N, N, cell, Math.ceil(20 / cell));
}

/** Two bars: the bytes of a shared prefix and the samples' own caches, and of one copy of the prompt each. */
export function prefixBars(container, { prefixBytes, sharedBytes, copiesBytes }, samples, fmtBytes) {
  const widest = Math.max(prefixBytes + sharedBytes, copiesBytes);
  const pct = (x) => `${((100 * x) / widest).toFixed(1)}%`;
  container.replaceChildren(
    el(
      'div',
      { class: 'bar-row' },
      el('span', { class: 'bar-label' }, `shared prefix + ${samples} own caches`),
      el(
        'div',
        { class: 'bar', role: 'img', 'aria-label': `${fmtBytes(prefixBytes + sharedBytes)} held` },
        el('i', { class: 'bar-prefix', style: `width:${pct(prefixBytes)}` }),
        el('i', { class: 'bar-own', style: `width:${pct(sharedBytes)}` }),
      ),
      el('span', { class: 'bar-value' }, fmtBytes(prefixBytes + sharedBytes)),
    ),
    el(
      'div',
      { class: 'bar-row' },
      el('span', { class: 'bar-label' }, `${samples} copies of the prompt`),
      el(
        'div',
        { class: 'bar', role: 'img', 'aria-label': `${fmtBytes(copiesBytes)} held` },
        el('i', { class: 'bar-copy', style: `width:${pct(copiesBytes)}` }),
      ),
      el('span', { class: 'bar-value' }, fmtBytes(copiesBytes)),
    ),
  );
}
