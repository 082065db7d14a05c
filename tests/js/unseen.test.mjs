// Inputs the golden set never saw: seeded random shapes, masks, causal, cross-attention and scales,
// checked against the independent float64 JS reference in helpers.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { mulberry32, randomNormal, referenceMHA, compare } from './helpers.mjs';

const mha = await createMHA();
const seed = Number(process.env.MHA_TEST_SEED ?? 20261129);

test(`random shapes agree with the float64 JS reference (seed ${seed})`, () => {
  const random = mulberry32(seed);
  const pick = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  for (let trial = 0; trial < 60; trial++) {
    const numHeads = pick(1, 6);
    const headDim = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65][pick(0, 15)];
    const o = { batch: pick(1, 3), seqLen: pick(1, 40), kvSeqLen: pick(1, 40), dModel: numHeads * headDim, numHeads };
    const maskKind = ['none', 'random', 'causal', 'both', 'padding'][pick(0, 4)];
    if (maskKind === 'causal' || maskKind === 'both') o.causal = true;
    if (maskKind === 'random' || maskKind === 'both') {
      o.mask = new Uint8Array(o.batch * o.seqLen * o.kvSeqLen).map(() => (random() < 0.6 ? 1 : 0));
    }
    if (maskKind === 'padding') {
      o.mask = new Uint8Array(o.batch * o.seqLen * o.kvSeqLen);
      for (let b = 0; b < o.batch; b++) {
        const valid = pick(1, o.kvSeqLen);
        for (let i = 0; i < o.seqLen; i++)
          o.mask.fill(1, (b * o.seqLen + i) * o.kvSeqLen, (b * o.seqLen + i) * o.kvSeqLen + valid);
      }
    }
    if (random() < 0.2) o.scale = (random() - 0.3) * 2;
    const inputScale = random() < 0.15 ? 20 : 1;
    const q = randomNormal(o.batch * o.seqLen * o.dModel, random, inputScale);
    const k = randomNormal(o.batch * o.kvSeqLen * o.dModel, random, inputScale);
    const v = randomNormal(o.batch * o.kvSeqLen * o.dModel, random);
    const expected = referenceMHA(q, k, v, o);
    const actual = mha.multiHeadAttention(q, k, v, o);
    const r = compare(actual, expected);
    const label = `trial ${trial} ${JSON.stringify({ ...o, mask: maskKind })}`;
    assert.equal(r.specialMismatch, -1, `${label}: NaN or infinity positions differ at ${r.specialMismatch}`);
    assert.ok(r.maxError <= 2e-5 * Math.max(1, r.maxExpected), `${label}: max error ${r.maxError}`);
  }
});

test('q === k === v (the spec example aliases all three) and out aliasing q', () => {
  const random = mulberry32(seed + 1);
  const o = { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 };
  const x = randomNormal(120, random);
  const expected = referenceMHA(x, x, x, o);
  assert.ok(compare(mha.multiHeadAttention(x, x, x, o), expected).maxError < 1e-6);
  const inPlace = x.slice();
  const returned = mha.multiHeadAttention(inPlace, inPlace, inPlace, { ...o, out: inPlace });
  assert.equal(returned, inPlace, 'out is returned');
  assert.ok(compare(inPlace, expected).maxError < 1e-6, 'out may alias the inputs');
});

test('subarray views with odd byte offsets and a boolean[] mask', () => {
  const random = mulberry32(seed + 2);
  const o = { batch: 1, seqLen: 7, kvSeqLen: 9, dModel: 8, numHeads: 2 };
  const backing = randomNormal(1 + 56 + 72 + 72, random);
  const q = backing.subarray(1, 57);
  const k = backing.subarray(57, 129);
  const v = backing.subarray(129, 201);
  const boolMask = Array.from({ length: 63 }, (_, i) => i % 4 !== 1);
  const expected = referenceMHA(q, k, v, { ...o, mask: boolMask });
  const r = compare(mha.multiHeadAttention(q, k, v, { ...o, mask: boolMask }), expected);
  assert.ok(r.maxError < 1e-6 && r.specialMismatch === -1);
});

test('numHeads = 1 equals attention of each head on its own slice, bit for bit', () => {
  const random = mulberry32(seed + 3);
  const [B, S, T, H, Dh] = [2, 6, 11, 4, 5];
  const D = H * Dh;
  const q = randomNormal(B * S * D, random);
  const k = randomNormal(B * T * D, random);
  const v = randomNormal(B * T * D, random);
  const all = mha.multiHeadAttention(q, k, v, { batch: B, seqLen: S, kvSeqLen: T, dModel: D, numHeads: H });
  for (let h = 0; h < H; h++) {
    const slice = (x, rows) => {
      const out = new Float32Array(B * rows * Dh);
      for (let r = 0; r < B * rows; r++) out.set(x.subarray(r * D + h * Dh, r * D + h * Dh + Dh), r * Dh);
      return out;
    };
    const one = mha.multiHeadAttention(slice(q, S), slice(k, T), slice(v, T), {
      batch: B,
      seqLen: S,
      kvSeqLen: T,
      dModel: Dh,
      numHeads: 1,
    });
    const fromAll = slice(all, S);
    assert.deepEqual(new Uint32Array(one.buffer), new Uint32Array(fromAll.buffer), `head ${h}`);
  }
});
