// The PyTorch golden set through the public TypeScript API, with the tolerances.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { checkOut, checkWeights, loadGoldenCases, readGolden } from './helpers.mjs';

const mha = await createMHA();
const cases = loadGoldenCases();
let worstRatio = 0;

test('the golden set is present', () => {
  assert.ok(cases.length >= 18, `expected at least 18 golden cases, found ${cases.length}`);
});

for (const c of cases) {
  const shape = { batch: c.batch, seqLen: c.seqLen, kvSeqLen: c.kvSeqLen, dModel: c.dModel, numHeads: c.numHeads };
  const q = readGolden(c, 'q');
  const k = readGolden(c, 'k');
  const v = readGolden(c, 'v');
  const mask = c.hasMask ? readGolden(c, 'mask') : undefined;

  test(`golden ${c.name}: multiHeadAttention within tolerance of out64, NaN rows identical`, () => {
    const r = checkOut(
      mha.multiHeadAttention(q, k, v, { ...shape, mask }),
      readGolden(c, 'out64'),
      readGolden(c, 'out32'),
    );
    assert.ok(r.ok, r.problem);
    worstRatio = Math.max(worstRatio, r.ratio);
  });

  test(`golden ${c.name}: splitHeads equals split_q exactly, mergeHeads inverts it`, () => {
    const headShape = { batch: c.batch, seqLen: c.seqLen, dModel: c.dModel, numHeads: c.numHeads };
    const split = mha.splitHeads(q, headShape);
    assert.deepEqual(new Uint32Array(split.buffer), new Uint32Array(readGolden(c, 'split_q').buffer));
    const merged = mha.mergeHeads(split, headShape);
    assert.deepEqual(
      new Uint32Array(merged.buffer),
      new Uint32Array(q.buffer.slice(q.byteOffset, q.byteOffset + q.byteLength)),
    );
  });

  test(`golden ${c.name}: attentionWeights within 1e-5 of weights64`, () => {
    const r = checkWeights(mha.attentionWeights(q, k, { ...shape, mask }), readGolden(c, 'weights64'));
    assert.ok(r.ok, r.problem);
  });
}

test('golden summary', () => {
  console.log(`# worst |ours - out64| / tolerance over ${cases.length} golden cases: ${worstRatio.toExponential(3)}`);
  assert.ok(worstRatio <= 1);
});
