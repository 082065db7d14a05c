// Properties of the options of docs/spec.md Part 2 over seeded random shapes. First the float64 JS
// reference itself, by identities that hold for any input (grouped-query attention is attention over
// repeated KV heads, key lengths and windows are masks, ALiBi is a bias, lse combines disjoint key sets),
// so the reference is trusted beyond the golden cases; then multiHeadAttention and attentionWeights of
// every build against that reference, with random combinations of the options.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, checkLse, compare, mulberry32, randomNormal, referenceAll, referenceMHA } from './helpers.mjs';

const seed = Number(process.env.MHA_TEST_SEED ?? 20261201);
const pickFrom = (random) => (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

/** A random shape with GQA: B, S, T, H = Hkv·group, Dh, and inputs q (B,S,H·Dh), k and v (B,T,Hkv·Dh). */
function randomGqaProblem(random) {
  const pick = pickFrom(random);
  const numKvHeads = pick(1, 3);
  const numHeads = numKvHeads * pick(1, 3);
  const headDim = [1, 3, 4, 8, 9, 16][pick(0, 5)];
  const o = {
    batch: pick(1, 3),
    seqLen: pick(1, 12),
    kvSeqLen: pick(1, 14),
    dModel: numHeads * headDim,
    numHeads,
    numKvHeads,
  };
  const kvD = numKvHeads * headDim;
  return {
    o,
    headDim,
    q: randomNormal(o.batch * o.seqLen * o.dModel, random),
    k: randomNormal(o.batch * o.kvSeqLen * kvD, random),
    v: randomNormal(o.batch * o.kvSeqLen * kvD, random),
  };
}

/** (B, T, Hkv·Dh) -> (B, T, H·Dh): each KV head repeated for the query heads that share it (repeat_interleave). */
function repeatKvHeads(x, { batch, kvSeqLen, numHeads, numKvHeads }, headDim) {
  const group = numHeads / numKvHeads;
  const out = new Float32Array(batch * kvSeqLen * numHeads * headDim);
  for (let row = 0; row < batch * kvSeqLen; row++) {
    for (let h = 0; h < numHeads; h++) {
      const g = Math.floor(h / group);
      out.set(
        x.subarray((row * numKvHeads + g) * headDim, (row * numKvHeads + g + 1) * headDim),
        (row * numHeads + h) * headDim,
      );
    }
  }
  return out;
}

/** The (B, S, T) mask equivalent to kvLengths, causal, queryOffset and window. */
function visibilityMask({
  batch,
  seqLen,
  kvSeqLen,
  kvLengths,
  causal,
  queryOffset = 0,
  window = [Infinity, Infinity],
}) {
  const mask = new Uint8Array(batch * seqLen * kvSeqLen);
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < seqLen; i++) {
      const p = queryOffset + i;
      for (let j = 0; j < kvSeqLen; j++) {
        const visible =
          (!kvLengths || j < kvLengths[b]) && (!causal || j <= p) && p - window[0] <= j && j <= p + window[1];
        mask[(b * seqLen + i) * kvSeqLen + j] = visible ? 1 : 0;
      }
    }
  }
  return mask;
}

test(`reference: GQA equals multi-head attention over repeated KV heads, bit for bit (seed ${seed})`, () => {
  const random = mulberry32(seed);
  for (let trial = 0; trial < 40; trial++) {
    const { o, headDim, q, k, v } = randomGqaProblem(random);
    const gqa = referenceMHA(q, k, v, { ...o, causal: trial % 2 === 1 });
    const mha = referenceMHA(q, repeatKvHeads(k, o, headDim), repeatKvHeads(v, o, headDim), {
      ...o,
      numKvHeads: undefined,
      causal: trial % 2 === 1,
    });
    assert.ok(bitsEqual(gqa, mha), `trial ${trial} ${JSON.stringify(o)}`);
  }
});

test(`reference: kvLengths, causal with queryOffset and window equal the same visibility as a mask (seed ${seed})`, () => {
  const random = mulberry32(seed + 1);
  const pick = pickFrom(random);
  for (let trial = 0; trial < 60; trial++) {
    const { o, q, k, v } = randomGqaProblem(random);
    const options = { ...o, causal: random() < 0.5, queryOffset: pick(0, 6) };
    if (random() < 0.6) options.kvLengths = Array.from({ length: o.batch }, () => pick(0, o.kvSeqLen));
    if (random() < 0.6)
      options.window = [random() < 0.2 ? Infinity : pick(0, 5), random() < 0.3 ? Infinity : pick(0, 5)];
    const direct = referenceAll(q, k, v, options);
    const masked = referenceAll(q, k, v, { ...o, mask: visibilityMask(options) });
    const label = `trial ${trial} ${JSON.stringify(options)}`;
    assert.ok(bitsEqual(direct.out, masked.out), `${label}: out`);
    assert.ok(bitsEqual(direct.lse, masked.lse), `${label}: lse`);
    assert.ok(bitsEqual(direct.weights, masked.weights), `${label}: weights`);
  }
});

test(`reference: ALiBi equals the bias -slope·|p - j| (float32), and emptyRows 'zero' is 'nan' with 0 for NaN (seed ${seed})`, () => {
  const random = mulberry32(seed + 2);
  const pick = pickFrom(random);
  for (let trial = 0; trial < 40; trial++) {
    const { o, q, k, v } = randomGqaProblem(random);
    const queryOffset = pick(0, 4);
    const alibiSlopes = Array.from({ length: o.numHeads }, () => random() * 0.5);
    const bias = new Float32Array(o.batch * o.numHeads * o.seqLen * o.kvSeqLen);
    for (let b = 0; b < o.batch; b++)
      for (let h = 0; h < o.numHeads; h++)
        for (let i = 0; i < o.seqLen; i++) {
          for (let j = 0; j < o.kvSeqLen; j++)
            bias[((b * o.numHeads + h) * o.seqLen + i) * o.kvSeqLen + j] =
              -alibiSlopes[h] * Math.abs(queryOffset + i - j);
        }
    const alibi = referenceMHA(q, k, v, { ...o, queryOffset, alibiSlopes });
    const biased = referenceMHA(q, k, v, { ...o, queryOffset, bias });
    const r = compare(alibi, biased);
    assert.ok(r.specialMismatch === -1 && r.maxError < 1e-5, `trial ${trial}: ALiBi vs bias ${r.maxError}`);
    // A mask hiding some whole rows: 'zero' gives 0 exactly where 'nan' gives NaN.
    const mask = Uint8Array.from({ length: o.batch * o.seqLen * o.kvSeqLen }, (_, n) =>
      Math.floor(n / o.kvSeqLen) % 3 === 0 ? 0 : 1,
    );
    const nan = referenceAll(q, k, v, { ...o, mask });
    const zero = referenceAll(q, k, v, { ...o, mask, emptyRows: 'zero' });
    assert.ok(
      bitsEqual(
        zero.out,
        nan.out.map((x) => (Number.isNaN(x) ? 0 : x)),
      ),
      `trial ${trial}: emptyRows out`,
    );
    assert.ok(
      bitsEqual(
        zero.weights,
        nan.weights.map((x) => (Number.isNaN(x) ? 0 : x)),
      ),
      `trial ${trial}: emptyRows weights`,
    );
    assert.ok(bitsEqual(zero.lse, nan.lse), `trial ${trial}: lse is -Infinity for an empty row either way`);
  }
});

test(`reference: the lse of two disjoint key sets combines their outputs into attention over both (seed ${seed})`, () => {
  const random = mulberry32(seed + 3);
  for (let trial = 0; trial < 40; trial++) {
    const { o, q, k, v } = randomGqaProblem(random);
    const { batch: B, seqLen: S, kvSeqLen: T, numHeads: H, dModel: D } = o;
    const Dh = D / H;
    const inA = Uint8Array.from({ length: B * S * T }, () => (random() < 0.5 ? 1 : 0));
    const inB = inA.map((x) => 1 - x);
    const all = referenceAll(q, k, v, o);
    const a = referenceAll(q, k, v, { ...o, mask: inA, emptyRows: 'zero' });
    const b = referenceAll(q, k, v, { ...o, mask: inB, emptyRows: 'zero' });
    for (let bi = 0; bi < B; bi++)
      for (let h = 0; h < H; h++)
        for (let i = 0; i < S; i++) {
          const at = (bi * H + h) * S + i;
          const lse = Math.max(a.lse[at], b.lse[at]) + Math.log1p(Math.exp(-Math.abs(a.lse[at] - b.lse[at])));
          assert.ok(
            Math.abs(lse - all.lse[at]) <= 1e-12 * Math.max(1, Math.abs(lse)),
            `trial ${trial}: lse ${lse} vs ${all.lse[at]}`,
          );
          const [wa, wb] = [Math.exp(a.lse[at] - lse), Math.exp(b.lse[at] - lse)];
          for (let e = 0; e < Dh; e++) {
            const col = (bi * S + i) * D + h * Dh + e;
            const combined = wa * a.out[col] + wb * b.out[col];
            assert.ok(Math.abs(combined - all.out[col]) <= 1e-6, `trial ${trial}: out ${combined} vs ${all.out[col]}`);
          }
        }
  }
});

/** Random options of every kind over a random GQA problem: each option present with some probability. */
function randomOptions(random, o) {
  const pick = pickFrom(random);
  const options = { ...o };
  if (random() < 0.4) options.causal = true;
  if (random() < 0.4) options.queryOffset = pick(0, 8);
  if (random() < 0.3) options.kvLengths = Array.from({ length: o.batch }, () => pick(0, o.kvSeqLen));
  if (random() < 0.3) options.window = [random() < 0.2 ? Infinity : pick(0, 6), random() < 0.4 ? Infinity : pick(0, 6)];
  if (random() < 0.3) options.softcap = 0.5 + random() * 20;
  if (random() < 0.3) options.alibiSlopes = Float32Array.from({ length: o.numHeads }, () => random() * 0.5);
  if (random() < 0.3) {
    options.biasShape = [random() < 0.5 ? 1 : o.batch, random() < 0.5 ? 1 : o.numHeads, o.seqLen, o.kvSeqLen];
    options.bias = randomNormal(
      options.biasShape.reduce((x, y) => x * y),
      random,
    );
    if (random() < 0.3) options.bias[pick(0, options.bias.length - 1)] = -Infinity;
  }
  if (random() < 0.3)
    options.mask = Uint8Array.from({ length: o.batch * o.seqLen * o.kvSeqLen }, () => (random() < 0.7 ? 1 : 0));
  if (random() < 0.3) options.emptyRows = random() < 0.5 ? 'zero' : 'nan';
  if (random() < 0.2) options.scale = (random() - 0.3) * 2;
  return options;
}

for (const [label, createOptions] of [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
]) {
  test(`${label}: random shapes with random v2 options agree with the float64 JS reference: out, lse, weights (seed ${seed})`, async () => {
    const mha = await createMHA(createOptions);
    try {
      const random = mulberry32(seed + 10);
      for (let trial = 0; trial < 60; trial++) {
        const { o, q, k, v } = randomGqaProblem(random);
        const options = randomOptions(random, o);
        const expected = referenceAll(q, k, v, options);
        const lse = new Float32Array(o.batch * o.numHeads * o.seqLen);
        const label = `trial ${trial} ${JSON.stringify({ ...options, bias: options.bias && 'bias', mask: options.mask && 'mask' })}`;
        const out = mha.multiHeadAttention(q, k, v, { ...options, lse });
        const r = compare(out, expected.out);
        assert.equal(r.specialMismatch, -1, `${label}: NaN positions of out differ at ${r.specialMismatch}`);
        assert.ok(r.maxError <= 2e-5 * Math.max(1, r.maxExpected), `${label}: out max error ${r.maxError}`);
        const l = checkLse(lse, Float32Array.from(expected.lse));
        assert.ok(l.ok, `${label}: ${l.problem}`);
        const w = compare(mha.attentionWeights(q, k, options), expected.weights);
        assert.ok(
          w.specialMismatch === -1 && w.maxError <= 1e-5,
          `${label}: weights max error ${w.maxError}, NaN mismatch at ${w.specialMismatch}`,
        );
      }
    } finally {
      mha.dispose();
    }
  });
}
