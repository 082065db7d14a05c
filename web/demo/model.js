// Pure data helpers of the demo, shared by the page (main.js, settings.js, heatmaps.js, split-merge.js) and the
// timing worker (worker.js). No DOM access here. Shapes use the project's letters, outermost first, row-major:
//   B batch, S queries, T keys/values (T = S in this demo), H heads, Dh = D / H, D model size.
import { mulberry32, normalSampler } from '../../scripts/lib/prng.mjs';
import { attention } from '../../scripts/lib/reference.mjs';

/** Limits of the demo's controls: attention heatmaps and a plain-JS peer must stay interactive. */
export const LIMITS = Object.freeze({
  batch: [1, 8],
  seqLen: [1, 128],
  dModel: [1, 512],
  numHeads: [1, 64],
  words: 32, // per sentence line
  lines: 8,
});

// ---------------------------------------------------------------------------------------------
// Deterministic hashing (the randomness is the project's PRNG, scripts/lib/prng.mjs).

/** FNV-1a 32-bit hash of a string, mixed with a seed. */
export function hash(text, seed = 0) {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // final avalanche (murmur3 fmix32)
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Inputs.

/** Seeded random q, k, v, each (B, S, D) with N(0, 1) entries. */
export function randomQKV(batch, seqLen, dModel, seed) {
  const n = batch * seqLen * dModel;
  const normal = normalSampler(mulberry32(seed));
  const make = () => {
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = normal();
    return x;
  };
  const q = make();
  const k = make();
  const v = make();
  return { q, k, v };
}

export const PAD = '·pad·';

/** Splits text into batch items (one per non-empty line) of words. Punctuation at word ends is dropped. */
export function tokenize(text) {
  return text
    .split(/\r?\n/)
    .map((line) =>
      line
        .split(/\s+/)
        .map((w) => w.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, ''))
        .filter((w) => w.length > 0),
    )
    .filter((words) => words.length > 0);
}

/**
 * What each head of the sentence input is built to look at. Head h uses recipe h % RECIPES.length.
 * content: hashed character trigrams of q's word against k's word (same or similar words).
 * shift: sinusoidal positional encodings whose q side is moved by `shift` positions, so query i
 *        lines up with key i + shift (previous word, next word, ...).
 * anchor: every query looks at the first word (a constant direction only key 0 has).
 */
export const RECIPES = Object.freeze([
  { kind: 'content', label: 'same / similar word', seed: 11, gain: 7 },
  { kind: 'shift', label: 'previous word', shift: -1, freq: 1.2, gain: 9 },
  { kind: 'shift', label: 'nearby words', shift: 0, freq: 0.5, gain: 6 },
  { kind: 'anchor', label: 'first word', gain: 6 },
  { kind: 'shift', label: 'next word', shift: 1, freq: 1.2, gain: 9 },
  { kind: 'shift', label: 'two words back', shift: -2, freq: 1.0, gain: 9 },
  { kind: 'content', label: 'similar spelling', seed: 29, gain: 4 },
  { kind: 'shift', label: 'wide context', shift: 0, freq: 0.12, gain: 3 },
]);

/** Adds a unit-length hashed character-trigram embedding of `word` into x[at .. at+width). */
function addWordFeatures(x, at, width, word, seed, gain) {
  const w = `^${word.toLowerCase()}$`;
  const features = [[w, 2]];
  for (let i = 0; i + 3 <= w.length; i++) features.push([w.slice(i, i + 3), 1]);
  const tmp = new Float64Array(width);
  for (const [f, weight] of features) {
    const h = hash(f, seed);
    tmp[h % width] += h & 0x80000000 ? weight : -weight;
    const h2 = hash(f, seed + 1);
    tmp[h2 % width] += h2 & 0x80000000 ? weight / 2 : -weight / 2;
  }
  let norm = 0;
  for (let i = 0; i < width; i++) norm += tmp[i] * tmp[i];
  norm = Math.sqrt(norm) || 1;
  for (let i = 0; i < width; i++) x[at + i] += (gain * tmp[i]) / norm;
}

/** Adds a unit-length sinusoidal positional encoding of position p into x[at .. at+width). */
function addPosition(x, at, width, p, freq, gain) {
  const pairs = Math.max(1, Math.floor(width / 2));
  const norm = Math.sqrt(pairs);
  for (let m = 0; m < pairs; m++) {
    const w = freq * Math.pow(0.55, m);
    x[at + 2 * m] += (gain * Math.cos(w * p)) / norm;
    if (2 * m + 1 < width) x[at + 2 * m + 1] += (gain * Math.sin(w * p)) / norm;
  }
}

/**
 * Deterministic q, k, v for tokenized sentences (one per batch item, padded with PAD to the longest).
 * Each head's column slice [h*Dh, (h+1)*Dh) gets its own recipe (see RECIPES), so heads attend in
 * visibly different patterns. Logits are scaled so that recipe.gain is roughly the logit margin
 * after the library's default 1/sqrt(Dh) scale.
 * @returns {{q: Float32Array, k: Float32Array, v: Float32Array, tokens: string[][], lengths: number[]}}
 */
export function sentenceQKV(lines, dModel, numHeads) {
  const batch = lines.length;
  const seqLen = Math.max(...lines.map((l) => l.length));
  const headDim = dModel / numHeads;
  const n = batch * seqLen * dModel;
  const q = new Float64Array(n);
  const k = new Float64Array(n);
  const v = new Float64Array(n);
  const tokens = lines.map((l) => [...l, ...Array(seqLen - l.length).fill(PAD)]);
  const qGain = Math.sqrt(headDim); // cancels the default 1/sqrt(Dh) scale
  for (let b = 0; b < batch; b++) {
    for (let s = 0; s < seqLen; s++) {
      const word = tokens[b][s];
      const row = (b * seqLen + s) * dModel;
      addWordFeatures(v, row, dModel, word, 7, 1);
      for (let h = 0; h < numHeads; h++) {
        const recipe = RECIPES[h % RECIPES.length];
        const at = row + h * headDim;
        // Heads that reuse a recipe get another hash seed, so they are not copies.
        const salt = 97 * Math.floor(h / RECIPES.length);
        if (recipe.kind === 'content') {
          addWordFeatures(q, at, headDim, word, recipe.seed + salt, recipe.gain * qGain);
          addWordFeatures(k, at, headDim, word, recipe.seed + salt, 1);
        } else if (recipe.kind === 'shift') {
          addPosition(q, at, headDim, s + recipe.shift, recipe.freq, recipe.gain * qGain);
          addPosition(k, at, headDim, s, recipe.freq, 1);
        } else {
          // anchor: q has a constant direction, only the first key points along it.
          q[at] += recipe.gain * qGain;
          if (s === 0) k[at] += 1;
          if (headDim > 1) addWordFeatures(k, at + 1, headDim - 1, word, 5 + salt, 0.3);
        }
      }
    }
  }
  return {
    q: Float32Array.from(q),
    k: Float32Array.from(k),
    v: Float32Array.from(v),
    tokens,
    lengths: lines.map((l) => l.length),
  };
}

// ---------------------------------------------------------------------------------------------
// Masks.

export const MASKS = Object.freeze({
  none: 'none',
  causal: 'causal',
  padding: 'key padding',
  random: 'random',
});

/** Valid key count of each batch item for the key-padding mask in random mode. */
export function paddingLengths(batch, seqLen) {
  return Array.from({ length: batch }, (_, b) => Math.max(1, seqLen - Math.ceil(((b + 1) * seqLen) / (2 * batch))));
}

/**
 * The library options for a mask choice, and a `visible(b, i, j)` predicate for drawing.
 * random: each key hidden with probability 0.35 (seeded), and one seeded query row per batch item
 * fully hidden, to show that such rows give NaN.
 */
export function buildMask(kind, batch, seqLen, { lengths, seed = 1 } = {}) {
  const T = seqLen;
  if (kind === 'none') return { options: {}, visible: () => true, lengths: null };
  if (kind === 'causal') return { options: { causal: true }, visible: (_b, i, j) => j <= i, lengths: null };
  const mask = new Uint8Array(batch * seqLen * T);
  let valid = null;
  if (kind === 'padding') {
    valid = lengths ?? paddingLengths(batch, seqLen);
    for (let b = 0; b < batch; b++)
      for (let i = 0; i < seqLen; i++)
        for (let j = 0; j < T; j++) mask[(b * seqLen + i) * T + j] = j < valid[b] ? 1 : 0;
  } else if (kind === 'random') {
    const next = mulberry32(seed ^ 0x5eed);
    for (let i = 0; i < mask.length; i++) mask[i] = next() < 0.65 ? 1 : 0;
    for (let b = 0; b < batch; b++) {
      const row = Math.floor(next() * seqLen);
      mask.fill(0, (b * seqLen + row) * T, (b * seqLen + row + 1) * T);
    }
  } else {
    throw new RangeError(`mask: expected one of ${Object.keys(MASKS).join(', ')}, got ${kind}`);
  }
  return { options: { mask }, visible: (b, i, j) => mask[(b * seqLen + i) * T + j] !== 0, lengths: valid };
}

// ---------------------------------------------------------------------------------------------
// Plain-JS attention: the speed peer and the float64 accuracy yardstick.

/**
 * Multi-head attention written the straightforward way in JavaScript: the project's float64 reference
 * (scripts/lib/reference.mjs, the bench's plain-js implementation and the JS tests' reference), called with
 * the demo's option names. Every sum in double precision (JS numbers), rounded to float32 only when stored;
 * same semantics as mha.multiHeadAttention, NaN rows included. q (B,S,D), k/v (B,T,D) -> out (B,S,D).
 */
export function plainMultiHeadAttention(q, k, v, { batch, seqLen, dModel, numHeads, kvSeqLen, mask, causal, scale }) {
  const shape = { B: batch, S: seqLen, T: kvSeqLen ?? seqLen, D: dModel, H: numHeads, causal, mask, scale };
  return attention(q, k, v, shape);
}

/** Largest |a - b| over entries; entries NaN in both count as equal, NaN in one as Infinity. */
export function maxAbsDiff(a, b) {
  let max = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (Number.isNaN(x) || Number.isNaN(y)) {
      if (Number.isNaN(x) !== Number.isNaN(y)) return Infinity;
      continue;
    }
    const d = Math.abs(x - y);
    if (d > max) max = d;
  }
  return max;
}

/** True when both arrays hold the same float32 bit patterns (any NaN equals any NaN). */
export function bitIdentical(a, b) {
  if (a.length !== b.length) return false;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) {
    if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return false;
  }
  return true;
}

/** Copies head h's column slice of x (B, S, D) into a dense (B, S, Dh) array. */
export function headSlice(x, batch, seqLen, dModel, numHeads, h) {
  const Dh = dModel / numHeads;
  const out = new Float32Array(batch * seqLen * Dh);
  for (let r = 0; r < batch * seqLen; r++) out.set(x.subarray(r * dModel + h * Dh, r * dModel + (h + 1) * Dh), r * Dh);
  return out;
}

/** Writes a dense (B, S, Dh) array into head h's column slice of x (B, S, D). */
export function setHeadSlice(x, slice, batch, seqLen, dModel, numHeads, h) {
  const Dh = dModel / numHeads;
  for (let r = 0; r < batch * seqLen; r++) x.set(slice.subarray(r * Dh, (r + 1) * Dh), r * dModel + h * Dh);
}

/** Takes batch item b of a (B, rows, cols) array as a dense (1, rows, cols) array. */
export function batchItem(x, b, rows, cols) {
  return x.slice(b * rows * cols, (b + 1) * rows * cols);
}

// ---------------------------------------------------------------------------------------------
// Shapes and strides of the spec's split / merge, in elements.

/** Row-major strides of a dense shape. */
export function denseStrides(shape) {
  const strides = new Array(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

/** The spec's split/merge steps with shapes, strides and whether the memory is contiguous. */
export function splitMergeSteps(B, S, D, H) {
  const Dh = D / H;
  const x = denseStrides([B, S, D]);
  const view = [S * D, D, Dh, 1];
  const swap = (a) => [a[0], a[2], a[1], a[3]];
  const outH = denseStrides([B, H, S, Dh]);
  return [
    { op: 'q, k, v', shape: [B, S, D], letters: 'B, S, D', strides: x, contiguous: true, note: 'input' },
    {
      op: '.view(B, S, H, Dh)',
      shape: [B, S, H, Dh],
      letters: 'B, S, H, Dh',
      strides: view,
      contiguous: true,
      note: 'no copy: D is cut into H runs of Dh',
    },
    {
      op: '.transpose(1, 2)',
      shape: [B, H, S, Dh],
      letters: 'B, H, S, Dh',
      strides: swap(view),
      contiguous: H === 1 || S === 1,
      note: 'no copy: only the strides swap',
    },
    {
      op: 'softmax(q kᵀ · scale) v',
      shape: [B, H, S, Dh],
      letters: 'B, H, S, Dh',
      strides: outH,
      contiguous: true,
      note: 'per-head output, heads act as a batch axis',
    },
    {
      op: '.transpose(1, 2)',
      shape: [B, S, H, Dh],
      letters: 'B, S, H, Dh',
      strides: swap(outH),
      contiguous: H === 1 || S === 1,
      note: 'no copy: strides swap back',
    },
    {
      op: '.contiguous()',
      shape: [B, S, H, Dh],
      letters: 'B, S, H, Dh',
      strides: view,
      contiguous: true,
      note: 'the one copy: memory now in (B, S, H, Dh) order',
    },
    {
      op: '.view(B, S, D)',
      shape: [B, S, D],
      letters: 'B, S, D',
      strides: x,
      contiguous: true,
      note: 'heads merged back into D',
    },
  ];
}
