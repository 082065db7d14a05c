// The PyTorch golden set of the v2 options (tests/golden/v2, docs/spec.md Part 2): every `stateless` case
// through multiHeadAttention (out, and lse) and attentionWeights, on the simd, baseline and threaded
// builds, with the accuracy rule of docs/spec.md; and through the float64 JS reference, which the
// property tests (options-properties.test.mjs) trust. The `cache` cases belong to the KV cache.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import {
  checkLse,
  checkOut,
  checkWeights,
  goldenOptions,
  goldenV2Dir,
  heapCopy,
  loadGoldenCases,
  readGolden,
  referenceAll,
} from './helpers.mjs';

const cases = loadGoldenCases(goldenV2Dir).filter((c) => c.kind === 'stateless');

test('the v2 golden set is present: at least 15 stateless cases, covering every option', () => {
  assert.ok(cases.length >= 15, `found ${cases.length} stateless cases`);
  const used = new Set(cases.flatMap((c) => Object.keys(c.options)));
  for (const option of [
    'numKvHeads',
    'queryOffset',
    'causal',
    'window',
    'kvLengths',
    'softcap',
    'alibiSlopes',
    'biasShape',
    'emptyRows',
    'scale',
  ]) {
    assert.ok(used.has(option), `no case sets ${option}`);
  }
});

/** q, k, v and the golden outputs of a case, and its options by API name (its bias and mask read). */
function loadCase(c) {
  const [q, k, v, out64, out32, weights64] = ['q', 'k', 'v', 'out64', 'out32', 'weights64'].map((role) =>
    readGolden(c, role),
  );
  return {
    q,
    k,
    v,
    out64,
    out32,
    weights64,
    lse64: c.files.lse64 ? readGolden(c, 'lse64') : undefined,
    options: goldenOptions(c),
  };
}

test('the float64 JS reference reproduces every stateless case (out, lse, weights)', () => {
  let worst = 0;
  for (const c of cases) {
    const g = loadCase(c);
    const { out, lse, weights } = referenceAll(g.q, g.k, g.v, g.options);
    const r = checkOut(out, g.out64, g.out32);
    assert.ok(r.ok, `${c.name}: out: ${r.problem}`);
    worst = Math.max(worst, r.ratio);
    if (g.lse64) {
      const l = checkLse(Float32Array.from(lse), g.lse64);
      assert.ok(l.ok, `${c.name}: ${l.problem}`);
    }
    const w = checkWeights(weights, g.weights64);
    assert.ok(w.ok, `${c.name}: weights: ${w.problem}`);
  }
  console.log(`# reference: worst |out - out64| / tolerance over ${cases.length} v2 cases: ${worst.toExponential(3)}`);
});

const BUILDS = [
  ['simd', {}],
  ['baseline', { simd: false }],
  ['simd-threads (2 threads)', { threads: 2 }],
];

for (const [label, createOptions] of BUILDS) {
  const mha = await createMHA(createOptions);
  after(() => mha.dispose());
  for (const c of cases) {
    const g = loadCase(c);
    test(`${label}: ${c.name}: multiHeadAttention out within tolerance of out64${g.lse64 ? ', lse of lse64' : ''}`, () => {
      const lse = g.lse64 ? new Float32Array(g.lse64.length).fill(12345) : undefined;
      const r = checkOut(mha.multiHeadAttention(g.q, g.k, g.v, { ...g.options, lse }), g.out64, g.out32);
      assert.ok(r.ok, r.problem);
      if (lse) {
        const l = checkLse(lse, g.lse64);
        assert.ok(l.ok, l.problem);
      }
    });
    test(`${label}: ${c.name}: attentionWeights within 1e-5 of weights64`, () => {
      const w = checkWeights(mha.attentionWeights(g.q, g.k, g.options), g.weights64);
      assert.ok(w.ok, w.problem);
    });
  }
}

test('every stateless case with q, k, v, bias, out and lse as heap tensors gives the bits of the Float32Array call', async () => {
  const mha = await createMHA();
  try {
    for (const c of cases) {
      const g = loadCase(c);
      const lseLength = c.batch * c.numHeads * c.seqLen;
      const lse = new Float32Array(lseLength);
      const expected = mha.multiHeadAttention(g.q, g.k, g.v, { ...g.options, lse });
      const [tq, tk, tv] = [g.q, g.k, g.v].map((a) => heapCopy(mha, a));
      const tOut = mha.allocate(g.q.length);
      const tLse = mha.allocate(lseLength);
      const options = { ...g.options, out: tOut, lse: tLse, bias: g.options.bias && heapCopy(mha, g.options.bias) };
      mha.multiHeadAttention(tq, tk, tv, options);
      assert.deepEqual(new Uint32Array(tOut.toArray().buffer), new Uint32Array(expected.buffer), `${c.name}: out`);
      assert.deepEqual(new Uint32Array(tLse.toArray().buffer), new Uint32Array(lse.buffer), `${c.name}: lse`);
      const weights = mha.attentionWeights(g.q, g.k, g.options);
      assert.deepEqual(
        new Uint32Array(mha.attentionWeights(g.q, g.k, { ...g.options, bias: options.bias }).buffer),
        new Uint32Array(weights.buffer),
        `${c.name}: weights with a heap-tensor bias`,
      );
      mha.dispose();
    }
  } finally {
    mha.dispose();
  }
});
