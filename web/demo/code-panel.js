// The code panel: the mha-wasm calls that reproduce what the page shows for the current settings, written
// so a reader can paste them into an app, and the Copy button.
import { $ } from './dom.js';

/**
 * The code of the current settings; `info` is mha.info of the page's instance (null before it loads),
 * `optionLines` the options panel's lines of an options object (modern-options.js codeLines), `kvWidth` the
 * row width of k and v (numKvHeads · headDim).
 */
export function renderCode(cfg, maskInfo, info, { optionLines = [], kvWidth = cfg.dModel } = {}) {
  const { batch: B, seqLen: S, dModel: D, numHeads: H, headDim: Dh } = cfg;
  const n = B * S * D;
  const lines = [
    "import { createMHA } from 'mha-wasm'; // on this server: '/dist/index.js'",
    '',
    'const mha = await createMHA();',
    `// mha.info: ${JSON.stringify(info ?? {})
      .replaceAll('"', '')
      .replaceAll(':', ': ')
      .replaceAll(',', ', ')}`,
    '',
    `// q, k, v: Float32Array (batch, seqLen, dModel) = (${B}, ${S}, ${D}), row-major: ${n} floats each`,
    `const n = ${B} * ${S} * ${D};`,
    'const q = Float32Array.from({ length: n }, () => Math.random() * 2 - 1); // your projected queries',
    ...['k', 'v'].map(
      (name) =>
        `const ${name} = Float32Array.from({ length: ${kvWidth === D ? 'n' : `${B} * ${S} * ${kvWidth}`} }, () => Math.random() * 2 - 1);`,
    ),
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
  if (optionLines.length) {
    // One options object for both calls: the panel's options hold code that would not fit on one line.
    lines.push(
      '',
      "// the options panel's settings; the maps draw one batch item of these weights",
      `const options = { ${[dims, ...extra.map((e) => e.trim().replace(/,.*$/, ''))].join(', ')},`,
      ...optionLines,
      '};',
      'const out = mha.multiHeadAttention(q, k, v, options);',
      'const weights = mha.attentionWeights(q, k, options); // what the maps draw',
    );
    $('code').textContent = lines.join('\n');
    return;
  }
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

export async function copyCode() {
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
