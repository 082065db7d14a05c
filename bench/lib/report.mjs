// Markdown tables and a hand-written SVG chart from the collected results.
import { SHAPES, describeShape, flopsOf } from './shapes.mjs';
import { jobSections } from './report-jobs.mjs';

export const IMPL_ORDER = [
  'mha-wasm',
  'mha-wasm-relaxed',
  'mha-wasm-fixed',
  'mha-wasm-2t',
  'mha-wasm-heap',
  'mha-wasm-heap-2t',
  'plain-js',
  'ort-std',
  'ort-mha',
  'ort-gqa',
  'tfjs-wasm',
];
export const IMPL_LABELS = {
  'mha-wasm': 'mha-wasm',
  'mha-wasm-relaxed': 'mha-wasm relaxed-simd',
  'mha-wasm-fixed': "mha-wasm simd: 'fixed'",
  'mha-wasm-2t': 'mha-wasm 2 threads',
  'mha-wasm-heap': 'mha-wasm heap tensors',
  'mha-wasm-heap-2t': 'mha-wasm heap tensors 2 threads',
  'plain-js': 'plain JS',
  'ort-std': 'ORT std ops',
  'ort-mha': 'ORT contrib MHA',
  'ort-gqa': 'ORT contrib GQA',
  'tfjs-wasm': 'tfjs-backend-wasm',
};
const COLORS = {
  'mha-wasm': '#d62728',
  'mha-wasm-relaxed': '#e377c2',
  'mha-wasm-fixed': '#bcbd22',
  'mha-wasm-2t': '#8c1a1a',
  'mha-wasm-heap': '#ff9896',
  'mha-wasm-heap-2t': '#c45a5a',
  'plain-js': '#7f7f7f',
  'ort-std': '#1f77b4',
  'ort-mha': '#17becf',
  'ort-gqa': '#2ca02c',
  'tfjs-wasm': '#ff7f0e',
};

const fmt = (x, digits = 2) => (x === undefined || x === null || !Number.isFinite(x) ? '—' : x.toFixed(digits));
const fmtMs = (x) =>
  x === undefined || !Number.isFinite(x)
    ? '—'
    : x >= 100
      ? x.toFixed(0)
      : x >= 10
        ? x.toFixed(1)
        : x >= 0.1
          ? x.toFixed(2)
          : x.toPrecision(2);
const fmtMB = (b) => (b ? (b / 2 ** 20).toFixed(0) : '—');
/** The bandwidth buffer against the last-level cache: a streaming read from DRAM needs it far larger. */
function bufferAgainstCache(bufferBytes, cacheBytes) {
  if (!cacheBytes) return "this machine's last-level cache size unknown";
  const times = bufferBytes / cacheBytes;
  const cache = `this machine's ${fmtMB(cacheBytes)} MiB last-level cache`;
  return times >= 4
    ? `${fmt(times, 0)}x ${cache}`
    : `**only ${fmt(times, 1)}x ${cache}: part of it may be read from cache**`;
}

export function statusText(r) {
  if (r.status === 'ok')
    return r.extrapolated
      ? `ok, extrapolated ${r.extrapolated.rows}/${r.extrapolated.totalRows} rows`
      : r.singleCall
        ? 'ok, first call only'
        : 'ok';
  if (r.status === 'wrong') return 'WRONG ANSWER';
  if (r.status === 'timeout') return `timeout (${r.phase ?? '?'})`;
  if (r.status === 'crash') return `crash ${r.signal ?? `exit ${r.exitCode}`} (${r.phase ?? '?'})`;
  if (r.status === 'skipped') return 'skipped';
  return `error (${r.phase ?? '?'})`;
}

/** mha-wasm speedup over this row: row median / mha-wasm median (> 1: mha-wasm faster). */
export function speedups(results) {
  const mha = new Map(
    results.filter((r) => r.impl === 'mha-wasm' && r.status === 'ok').map((r) => [r.shape, r.medianMs]),
  );
  for (const r of results) {
    const m = mha.get(r.shape);
    r.mhaSpeedup = r.status === 'ok' && m ? r.medianMs / m : undefined;
  }
}

function checkText(r) {
  if (!r.check) return '—';
  const where = r.check.full ? 'all rows' : `${r.check.rows}/${r.check.totalRows} rows`;
  return `${r.check.ok ? 'pass' : 'FAIL'} ${where}, ${r.check.maxAbsErr.toExponential(1)}`;
}

export function markdown(run) {
  const { results, ceiling, env } = run;
  const ceil = ceiling?.gflops;
  const lines = [];
  lines.push(`# mha-wasm benchmark (${run.mode})`, '');
  lines.push(
    `${env.date} · node ${env.node} · ${env.cpu} (${env.cores} cores) · commit ${env.commit} · mha.wasm sha256 ${env.wasmSha?.slice(0, 12)}`,
  );
  if (env.browser) lines.push(`browser: ${env.browser}`);
  if (env.loadAverageStart) {
    lines.push(
      `load average (1/5/15 min) at start ${env.loadAverageStart.join(' / ')}${env.loadAverageEnd ? `, at end ${env.loadAverageEnd.join(' / ')}` : ''} on ${env.cores} cores: ${Math.max(env.loadAverageStart[0], env.loadAverageEnd?.[0] ?? 0) > env.cores ? '**the machine was shared and busy; absolute figures are noisy, compare within a shape**' : 'quiet enough'}.`,
    );
  }
  lines.push('');
  const ceilRuns = ceiling?.runs
    ? ` (runs: ${ceiling.runs.map((c) => `${c.when} ${fmt(c.gflops, 1)}`).join(', ')})`
    : '';
  lines.push(
    `Ceiling (f32x4 mul+add on one core, the fastest of 4 loops of independent chains${ceiling?.form ? `; here ${ceiling.form}` : ''}): **${fmt(ceil, 1)} GFLOP/s**, best call of the best run${ceilRuns}.`,
  );
  if (ceiling?.fma)
    lines.push(
      `FMA ceiling (12 chains of f32x4.relaxed_madd): **${fmt(ceiling.fma.gflops, 1)} GFLOP/s**, ${fmt(ceiling.fma.ratioFma)}x mul+add in the same rounds.`,
    );
  else if (ceiling)
    lines.push(
      'FMA ceiling: this engine does not enable Relaxed SIMD (Node 20 needs --experimental-wasm-relaxed-simd).',
    );
  if (ceiling?.bandwidth) {
    lines.push(
      `Memory bandwidth (streaming v128 reads over ${fmtMB(ceiling.bandwidth.bufferBytes)} MB, ${bufferAgainstCache(ceiling.bandwidth.bufferBytes, env.lastLevelCacheBytes)}): **${fmt(ceiling.bandwidth.gbps, 1)} GB/s** on one thread` +
        (ceiling.bandwidthAllThreads
          ? `, **${fmt(ceiling.bandwidthAllThreads.gbps, 1)} GB/s** on ${ceiling.bandwidthAllThreads.threads} threads together.`
          : '.'),
    );
  }
  lines.push(
    'FLOPs per call = 4·B·H·S·T·Dh (masked positions included). Times are end to end: Float32Array in, Float32Array out; ' +
      'except the heap tensor rows, whose inputs are copied onto the wasm heap before timing and whose output stays there (no copies timed).',
  );
  const rounds = run.options?.rounds ?? 1;
  if (rounds > 1 && run.mode !== 'browser') {
    const once = SHAPES.filter((x) => flopsOf(x) > 2e10 && results.some((r) => r.shape === x.name)).map((x) => x.name);
    lines.push(
      `Each row of a shape up to 20 GFLOP per call pools ${rounds} rounds, in which the implementations ran in turn (forward, backward, ...), so a slow spell of the shared machine falls on all of them; median and reps are over all rounds' samples.${once.length ? ` ${once.join(', ')} ran once.` : ''}`,
    );
  }
  lines.push('');

  // Matrix: GFLOP/s per shape x implementation.
  const impls = IMPL_ORDER.filter((i) => results.some((r) => r.impl === i));
  const shapes = SHAPES.filter((s) => results.some((r) => r.shape === s.name));
  if (shapes.length) lines.push(...matrix(results, impls, shapes), ...threadScaling(results, shapes));
  lines.push(...jobSections(run));

  if (shapes.length) lines.push(...details(results, impls, shapes, ceil));
  const failures = results.filter((r) => r.status !== 'ok' && r.status !== 'skipped');
  if (failures.length) {
    lines.push('', '## Failures', '');
    for (const r of failures) {
      lines.push(
        `- **${IMPL_LABELS[r.impl] ?? r.impl} / ${r.shape}**: ${statusText(r)}${r.exitCode !== undefined && r.exitCode !== null ? `, exit code ${r.exitCode}` : ''}${r.signal ? `, signal ${r.signal}` : ''}${r.peakRssBytes ? `, peak RSS ${fmtMB(r.peakRssBytes)} MB` : ''}: \`${String(
          r.error ?? '',
        )
          .replace(/`/g, "'")
          .slice(0, 400)}\``,
      );
    }
  }
  const skipped = results.filter((r) => r.status === 'skipped');
  if (skipped.length) {
    lines.push('', '## Skipped', '');
    for (const r of skipped) lines.push(`- ${IMPL_LABELS[r.impl] ?? r.impl} / ${r.shape}: ${r.error}`);
  }
  lines.push('');
  return lines.join('\n');
}

/** GFLOP/s per shape x implementation, with mha-wasm's speedup over each peer. */
function matrix(results, impls, shapes) {
  const lines = [];
  lines.push('## GFLOP/s (mha-wasm speedup over the peer in brackets)', '');
  lines.push(`| shape (B,S,T,D,H) | ${impls.map((i) => IMPL_LABELS[i]).join(' | ')} |`);
  lines.push(`| --- | ${impls.map(() => '---:').join(' | ')} |`);
  for (const s of shapes) {
    const cells = impls.map((i) => {
      const r = results.find((x) => x.impl === i && x.shape === s.name);
      if (!r) return '';
      if (r.status !== 'ok') return statusText(r).split(' (')[0];
      const star = r.extrapolated ? '*' : '';
      const sp = i !== 'mha-wasm' && r.mhaSpeedup ? ` (${fmt(r.mhaSpeedup)}×)` : '';
      return `${fmt(r.gflops)}${star}${sp}`;
    });
    lines.push(`| ${s.name} ${describeShape(s)} | ${cells.join(' | ')} |`);
  }
  lines.push('', '\\* plain JS timed on an evenly spread subset of query rows and extrapolated to the full shape.', '');
  return lines;
}

/** One line per row: times, GFLOP/s, share of the ceiling, first call, load, memory, check. */
function details(results, impls, shapes, ceil) {
  const lines = [];
  lines.push('## Details', '');
  lines.push(
    '| shape | implementation | status | median ms | min ms | reps | GFLOP/s | % ceiling | mha-wasm speedup | first call ms | load ms | peak RSS MB | check vs plain JS (max abs err) |',
  );
  lines.push('| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |');
  for (const s of shapes) {
    for (const i of impls) {
      const r = results.find((x) => x.impl === i && x.shape === s.name);
      if (!r) continue;
      const ok = r.status === 'ok';
      lines.push(
        `| ${s.name} | ${IMPL_LABELS[i]} | ${statusText(r)} | ${ok ? fmtMs(r.medianMs) : '—'} | ${ok ? fmtMs(r.minMs) : '—'} | ${r.reps ?? '—'} | ${ok ? fmt(r.gflops) : '—'} | ${ok && ceil ? fmt((100 * r.gflops) / ceil, 1) : '—'} | ${r.mhaSpeedup ? `${fmt(r.mhaSpeedup)}×` : '—'} | ${fmtMs(r.firstCallMs)} | ${fmtMs(r.loadMs)} | ${fmtMB(r.peakRssBytes)} | ${checkText(r)} |`,
      );
    }
  }
  return lines;
}

/**
 * Per shape, 2 threads against 1 in the same run, for both ways of calling mha-wasm: Float32Arrays (the
 * copies into and out of the heap are serial) and heap tensors (no copies). Empty without a pair.
 */
function threadScaling(results, shapes) {
  const median = (impl, shape) =>
    results.find((r) => r.impl === impl && r.shape === shape && r.status === 'ok')?.medianMs;
  const modes = [
    ['mha-wasm', 'mha-wasm-2t'],
    ['mha-wasm-heap', 'mha-wasm-heap-2t'],
  ];
  const rows = shapes
    .map((s) => ({ s, times: modes.flatMap(([one, two]) => [median(one, s.name), median(two, s.name)]) }))
    .filter(({ times }) => times.some((t, i) => i % 2 === 1 && t !== undefined && times[i - 1] !== undefined));
  if (rows.length === 0) return [];
  const lines = ['## Thread scaling (2 threads / 1 thread, same run)', ''];
  lines.push(
    'Speed of 2 threads relative to 1 (1-thread median / 2-thread median; 2.00× is perfect). Copy mode: mha-wasm 2 threads vs ' +
      'mha-wasm, Float32Arrays in and out, whose copies run on the calling thread only. Heap tensors: the same pair with q, k, v and ' +
      'out on the wasm heap, no copies.',
    '',
  );
  lines.push(
    '| shape (B,S,T,D,H) | copy mode 1 thread ms | 2 threads ms | 2t / 1t | heap tensors 1 thread ms | 2 threads ms | 2t / 1t |',
  );
  lines.push('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const { s, times } of rows) {
    const [c1, c2, h1, h2] = times;
    const ratio = (one, two) => (one !== undefined && two !== undefined ? `${fmt(one / two)}×` : '—');
    lines.push(
      `| ${s.name} ${describeShape(s)} | ${fmtMs(c1)} | ${fmtMs(c2)} | ${ratio(c1, c2)} | ${fmtMs(h1)} | ${fmtMs(h2)} | ${ratio(h1, h2)} |`,
    );
  }
  lines.push('');
  return lines;
}

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Grouped bars of GFLOP/s per shape per implementation, with the ceiling as a dashed line. */
export function svg(run) {
  const { results, ceiling } = run;
  const ceil = ceiling?.gflops ?? 0;
  const impls = IMPL_ORDER.filter((i) => results.some((r) => r.impl === i));
  const shapes = SHAPES.filter((s) => results.some((r) => r.shape === s.name));
  const maxVal = Math.max(ceil, ...results.filter((r) => r.status === 'ok').map((r) => r.gflops), 1);
  const yMax = niceCeil(maxVal * 1.08);
  const W = 980,
    L = 60,
    R = 20,
    T = 50,
    plotH = 320;
  // Legend entries flow left to right and wrap; the last line also holds the note.
  const note = '× = failed (see table) · pale = extrapolated from a row subset';
  const legend = [];
  let lx = L,
    line = 0;
  for (const impl of impls) {
    const width = 28 + IMPL_LABELS[impl].length * 7;
    if (lx + width > W - R && lx > L) {
      lx = L;
      line += 1;
    }
    legend.push({ impl, x: lx, line });
    lx += width;
  }
  if (lx + 10 + note.length * 6.5 > W - R) {
    lx = L - 10;
    line += 1;
  }
  const noteAt = { x: lx + 10, line };
  const H = T + plotH + 58 + (line + 1) * 18;
  const plotW = W - L - R;
  const groupW = plotW / Math.max(1, shapes.length);
  const barW = Math.min(28, (groupW * 0.8) / Math.max(1, impls.length));
  const y = (v) => T + plotH - (v / yMax) * plotH;
  const out = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  out.push(
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(`Multi-head attention (${run.mode}; 1 thread unless labelled): GFLOP/s, higher is better`)}</text>`,
  );
  // Grid and y axis.
  const step = niceStep(yMax);
  for (let v = 0; v <= yMax + 1e-9; v += step) {
    out.push(`<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${L - 6}" y="${y(v) + 4}" text-anchor="end" fill="#444">${v}</text>`);
  }
  out.push(
    `<text x="16" y="${T + plotH / 2}" transform="rotate(-90 16 ${T + plotH / 2})" text-anchor="middle" fill="#444">GFLOP/s</text>`,
  );
  out.push(`<line x1="${L}" x2="${L}" y1="${T}" y2="${T + plotH}" stroke="#444"/>`);
  out.push(`<line x1="${L}" x2="${W - R}" y1="${T + plotH}" y2="${T + plotH}" stroke="#444"/>`);
  // Bars.
  shapes.forEach((s, gi) => {
    const gx = L + gi * groupW + (groupW - barW * impls.length) / 2;
    impls.forEach((impl, bi) => {
      const r = results.find((x) => x.impl === impl && x.shape === s.name);
      const x = gx + bi * barW;
      if (!r) return;
      if (r.status !== 'ok') {
        out.push(
          `<text x="${x + barW / 2}" y="${T + plotH - 4}" text-anchor="middle" fill="${COLORS[impl]}" font-weight="bold">×</text>`,
        );
        return;
      }
      const top = y(r.gflops);
      const op = r.extrapolated ? ' fill-opacity="0.45"' : '';
      out.push(
        `<rect x="${x + 1}" y="${top}" width="${barW - 2}" height="${T + plotH - top}" fill="${COLORS[impl]}"${op}><title>${esc(`${IMPL_LABELS[impl]} ${s.name}: ${r.gflops.toFixed(2)} GFLOP/s, ${r.medianMs.toFixed(2)} ms${r.extrapolated ? ' (extrapolated)' : ''}`)}</title></rect>`,
      );
      const label = r.gflops >= 10 ? r.gflops.toFixed(0) : r.gflops.toFixed(1);
      out.push(
        `<text x="${x + barW / 2}" y="${top - 3}" text-anchor="middle" font-size="9" fill="#222">${label}</text>`,
      );
    });
    out.push(
      `<text x="${L + gi * groupW + groupW / 2}" y="${T + plotH + 16}" text-anchor="middle" font-weight="bold">${esc(s.name)}</text>`,
    );
    out.push(
      `<text x="${L + gi * groupW + groupW / 2}" y="${T + plotH + 30}" text-anchor="middle" font-size="10" fill="#555">${esc(describeShape(s))}</text>`,
    );
  });
  // Ceiling.
  if (ceil) {
    out.push(`<line x1="${L}" x2="${W - R}" y1="${y(ceil)}" y2="${y(ceil)}" stroke="#000" stroke-dasharray="6 4"/>`);
    out.push(
      `<text x="${W - R - 4}" y="${y(ceil) - 5}" text-anchor="end">${esc(`WASM SIMD ceiling ${ceil.toFixed(1)} GFLOP/s (one core)`)}</text>`,
    );
  }
  // Legend.
  const legendY = (l) => T + plotH + 58 + l * 18;
  for (const { impl, x, line: l } of legend) {
    out.push(`<rect x="${x}" y="${legendY(l) - 10}" width="12" height="12" fill="${COLORS[impl]}"/>`);
    out.push(`<text x="${x + 16}" y="${legendY(l)}">${esc(IMPL_LABELS[impl])}</text>`);
  }
  out.push(`<text x="${noteAt.x}" y="${legendY(noteAt.line)}" fill="#555">${esc(note)}</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function niceStep(max) {
  const raw = max / 6;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function niceCeil(v) {
  const s = niceStep(v);
  return Math.ceil(v / s) * s;
}
