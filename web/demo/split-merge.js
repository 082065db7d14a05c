// The split/merge diagram: how one token's D columns of q become row t of each head's (S, Dh) matrix and
// how the head outputs are stitched back, drawn from the instance's real splitHeads and output (so the
// picture is checked, not assumed), plus the strides of each view and where in memory a head starts.
import { $, el } from './dom.js';
import { headColor, valueColor } from './colors.js';
import { tuple } from './format.js';
import { splitMergeSteps } from './model.js';

function strip(values, H, Dh, labelFor) {
  const segments = [];
  for (let h = 0; h < H; h++) {
    const cells = [];
    for (let e = 0; e < Dh; e++) cells.push(el('i', { style: `background:${valueColor(h, values[h * Dh + e])}` }));
    segments.push(
      el(
        'span',
        {
          class: 'seg',
          style: `flex-grow:${Dh}; --head:${headColor(h)}`,
          title: labelFor(h),
          'aria-label': labelFor(h),
          role: 'img',
        },
        ...cells,
      ),
    );
  }
  const bar = el('div', { class: 'strip' }, ...segments);
  if (H > 8) return bar;
  // Column ranges under each head's run (only while they fit).
  const ticks = Array.from({ length: H }, (_, h) =>
    el(
      'span',
      { style: `flex-grow:${Dh}; color:${headColor(h, 38)}` },
      H <= 4 ? `h${h} · ${h * Dh}–${(h + 1) * Dh - 1}` : `h${h}`,
    ),
  );
  return el('div', { class: 'strip-wrap' }, bar, el('div', { class: 'strip-ticks', 'aria-hidden': 'true' }, ...ticks));
}

function miniMatrix(qh, h, S, Dh, t) {
  const px = Math.max(1, Math.min(10, Math.floor(120 / Math.max(S, Dh))));
  const canvas = el('canvas', {
    width: Dh * px,
    height: S * px,
    role: 'img',
    'aria-label': `head ${h} of q after the transpose: ${S} rows by ${Dh} columns; row ${t} highlighted`,
  });
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

/** The diagram of the token picked, the strides table of every step and where that token's heads start. */
export function renderSplitMerge(state) {
  const { cfg, qb, qh, outb, rowLabels, item, token: t } = state;
  const { seqLen: S, dModel: D, numHeads: H, headDim: Dh, batch: B } = cfg;
  const qRow = qb.subarray(t * D, (t + 1) * D);
  const outRow = outb.subarray(t * D, (t + 1) * D);
  const word = rowLabels[t];
  const tokenName = cfg.source === 'sentence' ? `token ${t} “${word}”` : `token ${t}`;

  // splitHeads really puts column h*Dh+e of row t at [h, t, e]: check it for the row drawn.
  let splitMatches = true;
  for (let h = 0; h < H; h++)
    for (let e = 0; e < Dh; e++) if (!Object.is(qh[(h * S + t) * Dh + e], qRow[h * Dh + e])) splitMatches = false;

  const heads = [];
  for (let h = 0; h < H; h++) {
    heads.push(
      el(
        'div',
        { class: 'headbox', style: `--head:${headColor(h)}` },
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
    el(
      'div',
      { class: 'sm-step' },
      el('div', { class: 'sm-label' }, el('code', {}, `q[${item}, ${t}, :]`), el('small', {}, `(D) = (${D})`)),
      strip(qRow, H, Dh, (h) => `head ${h}: columns ${h * Dh}–${(h + 1) * Dh - 1}`),
    ),
    el(
      'div',
      { class: 'sm-arrow' },
      el('span', {}, '↓ '),
      el('code', {}, `.view(${B}, ${S}, ${H}, ${Dh})`),
      ' then ',
      el('code', {}, '.transpose(1, 2)'),
      el('span', { class: 'sm-muted' }, ` → (B, H, S, Dh) = ${tuple([B, H, S, Dh])}`),
    ),
    el('div', { class: 'sm-heads' }, ...heads),
    el(
      'p',
      { class: `sm-check ${splitMatches ? 'ok' : 'bad'}` },
      splitMatches ? '✓ ' : '✗ ',
      el('code', {}, `mha.splitHeads(q)[${item}, h, ${t}, e]`),
      splitMatches ? ' equals ' : ' differs from ',
      el('code', {}, `q[${item}, ${t}, h·${Dh} + e]`),
      ' for every h, e of this row.',
    ),
    el(
      'div',
      { class: 'sm-arrow' },
      el('span', {}, '↓ '),
      'attention per head, then ',
      el('code', {}, '.transpose(1, 2).contiguous().view(B, S, D)'),
    ),
    el(
      'div',
      { class: 'sm-step' },
      el('div', { class: 'sm-label' }, el('code', {}, `out[${item}, ${t}, :]`), el('small', {}, `(D) = (${D})`)),
      outNaN
        ? el('p', { class: 'sm-nan' }, 'This query row is fully masked: every output column is NaN.')
        : strip(outRow, H, Dh, (h) => `head ${h}'s output: columns ${h * Dh}–${(h + 1) * Dh - 1}`),
    ),
  );

  const tbody = $('strides').tBodies[0];
  tbody.replaceChildren(
    ...splitMergeSteps(B, S, D, H).map((step) =>
      el(
        'tr',
        { class: step.contiguous ? '' : 'noncontig' },
        el('th', { scope: 'row' }, el('code', {}, step.op)),
        el(
          'td',
          { 'data-label': 'shape' },
          el('span', { class: 'letters' }, `(${step.letters})`),
          ` = ${tuple(step.shape)}`,
        ),
        el('td', { 'data-label': 'strides' }, el('code', {}, tuple(step.strides))),
        el(
          'td',
          { 'data-label': 'memory' },
          step.contiguous ? 'contiguous' : 'strided view',
          el('small', {}, ` · ${step.note}`),
        ),
      ),
    ),
  );
  const start = item * S * D + t * D;
  $('offset-note').replaceChildren(
    'Element ',
    el('code', {}, 'q[b, s, h·Dh + e]'),
    ` sits at offset b·${S * D} + s·${D} + h·${Dh} + e, so head h of ${tokenName} starts at offset ${start} + h·${Dh}. `,
    'mha-wasm does not copy to split: its kernel reads each head in place with the transposed view\u2019s strides, and writes its output columns directly into the merged (B, S, D) result.',
  );
}
