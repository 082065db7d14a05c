// Shared by the JS tests: golden-vector loading, a seeded RNG and an independent float64 reference.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// The PyTorch golden vectors are test fixtures of this repository (tests/golden/README.md).
export const goldenDir = process.env.MHA_GOLDEN_DIR ?? path.join(repoRoot, 'tests/golden/v1');

export function loadGoldenCases() {
  return JSON.parse(fs.readFileSync(path.join(goldenDir, 'cases.json'), 'utf8'));
}

/** Reads a golden file as the typed array its role implies (mask: Uint8Array, others: Float32Array). */
export function readGolden(c, role) {
  const bytes = fs.readFileSync(path.join(goldenDir, c.files[role]));
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  return role === 'mask' ? new Uint8Array(copy) : new Float32Array(copy);
}

/** mulberry32: a small seeded generator, so failures can be replayed from the printed seed. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomNormal(n, random, scale = 1) {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = 1 - random();
    const v = random();
    out[i] = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v) * scale;
  }
  return out;
}

/**
 * The spec, independently, in float64 JS: per head softmax(q k^T * scale) v with hidden keys at -inf.
 * q (B,S,D), k/v (B,T,D), mask (B,S,T) optional -> (B,S,D).
 */
export function referenceMHA(q, k, v, { batch: B, seqLen: S, kvSeqLen: T = S, dModel: D, numHeads: H, mask, causal = false, scale }) {
  const Dh = D / H;
  const s = scale ?? Math.fround(1 / Math.sqrt(Dh));
  const out = new Float32Array(B * S * D);
  const scores = new Float64Array(T);
  const hidden = new Uint8Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < S; i++) {
        let max = -Infinity;
        for (let j = 0; j < T; j++) {
          const visible = (!causal || j <= i) && (!mask || mask[(b * S + i) * T + j]);
          hidden[j] = visible ? 0 : 1;
          if (!visible) { scores[j] = -Infinity; continue; }
          let dot = 0;
          for (let e = 0; e < Dh; e++) dot += q[(b * S + i) * D + h * Dh + e] * k[(b * T + j) * D + h * Dh + e];
          scores[j] = dot * s;
          if (scores[j] > max) max = scores[j];
        }
        let sum = 0;
        for (let j = 0; j < T; j++) { scores[j] = max === -Infinity ? NaN : Math.exp(scores[j] - max); sum += scores[j]; }
        for (let e = 0; e < Dh; e++) {
          let acc = 0;
          // hidden keys (-inf scores) are never read, as in the C++ reference
          for (let j = 0; j < T; j++) if (hidden[j] === 0) acc += scores[j] * v[(b * T + j) * D + h * Dh + e];
          out[(b * S + i) * D + h * Dh + e] = acc / sum;
        }
      }
    }
  }
  return out;
}

/** Largest |a - b| over positions where both are finite, and whether NaN positions agree. */
export function compare(actual, expected) {
  let maxError = 0;
  let nanMismatch = -1;
  let maxExpected = 0;
  for (let i = 0; i < expected.length; i++) {
    if (Number.isNaN(actual[i]) !== Number.isNaN(expected[i])) { if (nanMismatch < 0) nanMismatch = i; continue; }
    if (Number.isNaN(expected[i])) continue;
    maxError = Math.max(maxError, Math.abs(actual[i] - expected[i]));
    maxExpected = Math.max(maxExpected, Math.abs(expected[i]));
  }
  return { maxError, nanMismatch, maxExpected };
}

/**
 * What the README examples (examples/node.mjs, examples/browser.html, examples/vite) print as their last
 * row: the last query row of the causal call sees every key of its batch item (the first row would only
 * see itself, and equal the input whatever the kernel did).
 */
export function expectedLastRow() {
  const x = Float32Array.from({ length: 120 }, (_, i) => Math.sin(i));
  const out = referenceMHA(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3, causal: true });
  return Array.from(out.subarray(108), (n) => n.toFixed(4)).join(' ');
}

/** The spec's example (batch 2, seq 5, d_model 12, 3 heads): golden q, k, v, out64 and its shape. */
export function loadSpecExample() {
  const example = loadGoldenCases().find((c) => c.name === 'example_b2_s5_d12_h3');
  const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(example, role));
  return { q, k, v, out64, shape: { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 } };
}
