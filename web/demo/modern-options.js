// The options panel of the synthetic view: grouped-query heads, query offset, window, sinks, softcap, ALiBi
// and RoPE. Reads and validates them (inline messages, never an exception), turns them into the options of
// mha.attentionWeights / multiHeadAttention, and says which (query, key) cells they leave visible, so the
// maps can hatch the rest and draw the window's band.
import { $, el } from './dom.js';

export const modernControls = {
  numKvHeads: $('numKvHeads'),
  queryOffset: $('queryOffset'),
  windowLeft: $('windowLeft'),
  windowRight: $('windowRight'),
  sinks: $('sinks'),
  softcap: $('softcap'),
  alibi: $('alibi'),
  rope: $('rope'),
  ropeTheta: $('ropeTheta'),
};

/** Fields whose inputs fire `input` (typed); the others fire `change`. */
export const TYPED_FIELDS = ['queryOffset', 'windowLeft', 'windowRight', 'sinks', 'softcap', 'ropeTheta'];

const NAMES = {
  queryOffset: 'Query offset',
  windowLeft: 'Window, keys before',
  windowRight: 'Window, keys after',
  sinks: 'Sink logit',
  softcap: 'Softcap',
  ropeTheta: 'RoPE theta',
};

/** Blank means "off" (null); else a number that passes `ok`, or an inline message saying what it must be. */
function readOptional(field, errors, { integer = false, ok, must }) {
  const raw = modernControls[field].value.trim();
  if (raw === '') return null;
  const value = Number(raw);
  if (!Number.isFinite(value) || (integer && !Number.isInteger(value)) || !ok(value)) {
    errors.push({ field, text: `${NAMES[field]} must be ${must}, or blank for none; got “${raw}”.` });
    return null;
  }
  return value;
}

/** Keeps the KV-heads picker to the divisors of H, named as the presets they are (MHA, GQA, MQA). */
export function syncKvHeads(numHeads) {
  const select = modernControls.numKvHeads;
  const previous = Number(select.value);
  const options = [];
  for (let g = numHeads; g >= 1; g--) {
    if (numHeads % g !== 0) continue;
    // Short enough for the field's width at every layout; the help line below says what the presets mean.
    const label =
      g === numHeads
        ? `${g}: MHA, one per head`
        : g === 1
          ? `1: MQA, all ${numHeads} share it`
          : `${g}: GQA, ${numHeads / g} heads each`;
    options.push(el('option', { value: String(g) }, label));
  }
  select.replaceChildren(...options);
  select.value = String(numHeads % previous === 0 && previous <= numHeads ? previous : numHeads);
}

/** Reads the panel for H query heads of S rows. Returns the settings; problems go into `errors`. */
export function readModernOptions(numHeads, errors) {
  const numKvHeads = Number(modernControls.numKvHeads.value) || numHeads;
  const queryOffset =
    readOptional('queryOffset', errors, {
      integer: true,
      ok: (x) => x >= 0 && x <= 64,
      must: 'a whole number from 0 to 64',
    }) ?? 0;
  const bound = { integer: true, ok: (x) => x >= 0 && x <= 128, must: 'a whole number from 0 to 128' };
  const left = readOptional('windowLeft', errors, bound);
  const right = readOptional('windowRight', errors, bound);
  const sink = readOptional('sinks', errors, { ok: (x) => Math.abs(x) <= 50, must: 'a number from −50 to 50' });
  const softcap = readOptional('softcap', errors, { ok: (x) => x > 0 && x <= 1000, must: 'a number above 0' });
  const theta = modernControls.rope.checked
    ? readOptional('ropeTheta', errors, { ok: (x) => x > 1 && x <= 1e7, must: 'a number above 1 (10000 in Llama 2)' })
    : null;
  // The chart explains RoPE even while it is off in the maps: it takes any valid θ typed, else Llama 2's.
  const typed = Number(modernControls.ropeTheta.value);
  return {
    chartTheta: theta ?? (typed > 1 && typed <= 1e7 ? typed : 10000),
    numKvHeads,
    queryOffset,
    window: left === null && right === null ? null : [left ?? Infinity, right ?? Infinity],
    sink,
    softcap,
    alibi: modernControls.alibi.checked,
    ropeTheta: modernControls.rope.checked ? (theta ?? 10000) : null,
  };
}

/** ALiBi's slopes for H heads: the geometric sequence 2^(−8(h+1)/H) of the ALiBi paper. */
export const alibiSlopes = (numHeads) => Array.from({ length: numHeads }, (_, h) => 2 ** ((-8 * (h + 1)) / numHeads));

/**
 * The options of mha.attentionWeights and multiHeadAttention that the panel sets, for S query rows and H
 * heads of Dh; `mha` makes the RoPE tables (ropeTables, the same function the cache uses).
 */
export function libraryOptions(modern, { seqLen, numHeads, headDim }, mha) {
  const o = {};
  if (modern.numKvHeads !== numHeads) o.numKvHeads = modern.numKvHeads;
  if (modern.queryOffset) o.queryOffset = modern.queryOffset;
  if (modern.window) o.window = modern.window;
  if (modern.sink !== null) o.sinks = new Array(numHeads).fill(modern.sink);
  if (modern.softcap !== null) o.softcap = modern.softcap;
  if (modern.alibi) o.alibiSlopes = alibiSlopes(numHeads);
  if (modern.ropeTheta !== null && headDim >= 2 && headDim % 2 === 0) {
    const positions = modern.queryOffset + seqLen;
    o.rope = { ...mha.ropeTables({ rotaryDim: headDim, positions, theta: modern.ropeTheta }) };
  }
  return o;
}

/**
 * The k (or v) of Hkv key/value heads for the toy data, (1, S, Hkv·Dh): KV head g is the column slice of
 * query head g·(H/Hkv), the first of its group, so every head of a group reads the same keys.
 */
export function kvHeadsOf(x, seqLen, dModel, numHeads, numKvHeads) {
  if (numKvHeads === numHeads) return x;
  const Dh = dModel / numHeads;
  const group = numHeads / numKvHeads;
  const out = new Float32Array(seqLen * numKvHeads * Dh);
  for (let s = 0; s < seqLen; s++)
    for (let g = 0; g < numKvHeads; g++) {
      const from = s * dModel + g * group * Dh;
      out.set(x.subarray(from, from + Dh), (s * numKvHeads + g) * Dh);
    }
  return out;
}

/**
 * Whether query row i sees key j under the panel's position rules (causal counted from the query offset,
 * and the window), ANDed with `baseVisible`, the mask's own rule without causality.
 */
export function visibleWith(modern, causal, baseVisible) {
  const offset = modern.queryOffset;
  const [left, right] = modern.window ?? [Infinity, Infinity];
  return (i, j) => {
    const p = offset + i;
    return baseVisible(i, j) && (!causal || j <= p) && j >= p - left && j <= p + right;
  };
}

/** The panel's options as code lines of an options object, for the code panel (none: an empty list). */
export function codeLines(modern, { seqLen, numHeads, headDim }) {
  const lines = [];
  const G = modern.numKvHeads;
  if (G !== numHeads) lines.push(`  numKvHeads: ${G}, // k and v: (batch, seqLen, ${G} * headDim)`);
  if (modern.queryOffset)
    lines.push(`  queryOffset: ${modern.queryOffset}, // query row i sits at position ${modern.queryOffset} + i`);
  if (modern.window) lines.push(`  window: [${modern.window.map(String).join(', ')}], // keys p - left .. p + right`);
  if (modern.sink !== null)
    lines.push(`  sinks: new Array(${numHeads}).fill(${modern.sink}), // one logit per head, no value`);
  if (modern.softcap !== null) lines.push(`  softcap: ${modern.softcap},`);
  if (modern.alibi)
    lines.push(`  alibiSlopes: Array.from({ length: ${numHeads} }, (_, h) => 2 ** (-8 * (h + 1) / ${numHeads})),`);
  if (modern.ropeTheta !== null)
    lines.push(
      `  rope: { ...mha.ropeTables({ rotaryDim: ${headDim}, positions: ${modern.queryOffset + seqLen}, theta: ${modern.ropeTheta} }) },`,
    );
  return lines;
}

/** One line for the derived-settings paragraph: what the panel changed from plain attention. */
export function describeModern(modern, numHeads) {
  const parts = [];
  if (modern.numKvHeads !== numHeads) parts.push(`${modern.numKvHeads} KV heads`);
  if (modern.queryOffset) parts.push(`query offset ${modern.queryOffset}`);
  if (modern.window) parts.push(`window [${modern.window.map((x) => (x === Infinity ? '∞' : x)).join(', ')}]`);
  if (modern.sink !== null) parts.push(`sink logit ${modern.sink}`);
  if (modern.softcap !== null) parts.push(`softcap ${modern.softcap}`);
  if (modern.alibi) parts.push('ALiBi');
  if (modern.ropeTheta !== null) parts.push(`RoPE θ ${modern.ropeTheta}`);
  return parts.length ? ` Options: ${parts.join(', ')}.` : '';
}
