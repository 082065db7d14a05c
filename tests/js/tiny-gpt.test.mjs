// tiny-gpt (models/tiny-gpt) run by the JS runner on mha-wasm, against PyTorch's golden data
// (models/tiny-gpt/golden, made by make_golden.py): logits at every position, prefill + single steps, and
// greedy generations byte for byte. TINY_GPT_DIR points the test at another model folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { argmax, float16BitsToFloat32, generate, sampleToken, seededRandom } from '../../models/tiny-gpt/runner.mjs';
import { kvCacheBackend, repeatedKvBackend, roundToFloat16 } from '../../models/tiny-gpt/attention-backends.mjs';
import { readTinyGPT, readTinyGPTGolden, readTinyGPTHeads, tinyGptDir } from '../../models/tiny-gpt/load-node.mjs';

const modelDir = process.env.TINY_GPT_DIR ?? tinyGptDir;
const mha = await createMHA();
const model = readTinyGPT(modelDir);
const golden = readTinyGPTGolden(modelDir);
const V = model.config.vocab_size;
const promptBytes = [...new TextEncoder().encode(golden.logits.prompt)];

/**
 * Every logit of rows [firstRow, firstRow + rows) within 1e-4 * max(1, |PyTorch's|); returns the worst
 * |diff| / allowed. reference: (200, V) PyTorch logits.
 */
function assertLogitsClose(rows, firstRow, actual, label, reference = golden.logits.values) {
  assert.equal(actual.length, rows * V, `${label}: logits length`);
  let worst = 0;
  for (let r = 0; r < rows; r++) {
    for (let t = 0; t < V; t++) {
      const expected = reference[(firstRow + r) * V + t];
      const got = actual[r * V + t];
      const ratio = Math.abs(got - expected) / (1e-4 * Math.max(1, Math.abs(expected)));
      if (!(ratio <= 1)) assert.fail(`${label}: position ${firstRow + r}, byte ${t}: got ${got}, PyTorch ${expected}`);
      worst = Math.max(worst, ratio);
    }
  }
  return worst;
}

/** The backends under test: today's, and the KV cache one once the package has createKVCache. */
const backends = [
  { name: 'repeated-KV multiHeadAttention (temporary)', make: (dtype) => repeatedKvBackend(mha, { dtype }), skip: false },
  { name: 'createKVCache', make: (dtype) => kvCacheBackend(mha, { dtype }), skip: typeof mha.createKVCache !== 'function' && 'createKVCache is not in this build yet' },
];

test('golden data matches the model it was made from', () => {
  assert.deepEqual(golden.logits.shape, [200, V]);
  assert.equal(promptBytes.length, 200);
  assert.equal(golden.logits.values.length, 200 * V);
  assert.equal(golden.generations.length, 3);
  for (const g of golden.generations) for (const key of ['f32', 'f16']) assert.equal(g[key].tokens.length, golden.generatedBytes);
});

for (const backend of backends) {
  test(`${backend.name}: full prefill of the 200-byte prompt gives PyTorch's logits at every position`, { skip: backend.skip }, (t) => {
    const session = model.createSession(backend.make('float32'));
    const logits = session.forward(promptBytes, { allLogits: true });
    const worst = assertLogitsClose(200, 0, logits, 'prefill(200)');
    t.diagnostic(`worst |diff| / (1e-4 max(1, |logit|)) = ${worst.toFixed(4)}`);
    session.free();
  });

  test(`${backend.name}: prefill of 100 bytes then 100 single-byte steps gives PyTorch's logits`, { skip: backend.skip }, (t) => {
    const session = model.createSession(backend.make('float32'));
    let worst = assertLogitsClose(100, 0, session.forward(promptBytes.slice(0, 100), { allLogits: true }), 'prefill(100)');
    for (let p = 100; p < 200; p++) {
      worst = Math.max(worst, assertLogitsClose(1, p, session.forward([promptBytes[p]]), `step at position ${p}`));
    }
    t.diagnostic(`worst |diff| / (1e-4 max(1, |logit|)) = ${worst.toFixed(4)}`);
    session.free();
  });

  test(`${backend.name}: prefill of 50 bytes, then of 150 more at once, gives PyTorch's logits`, { skip: backend.skip }, (t) => {
    const session = model.createSession(backend.make('float32'));
    let worst = assertLogitsClose(50, 0, session.forward(promptBytes.slice(0, 50), { allLogits: true }), 'prefill(50)');
    worst = Math.max(worst, assertLogitsClose(150, 50, session.forward(promptBytes.slice(50), { allLogits: true }), 'prefill(150) after 50'));
    t.diagnostic(`worst |diff| / (1e-4 max(1, |logit|)) = ${worst.toFixed(4)}`);
    session.free();
  });

  // With f16 K/V the tolerance is looser: a k or v that lies within float rounding of a binary16 rounding
  // boundary rounds one way in JS (float64 sums) and the other in PyTorch (float32 sums), which moves it by
  // one f16 step (2^-11 relative) instead of 1e-7. So: within 5e-4 * max(1, |logit|) of PyTorch over the
  // same f16-rounded K/V, and on average 10 times closer to that run than to PyTorch's f32 K/V run.
  test(`${backend.name} (float16 K/V): prefill(100) + 100 steps gives PyTorch's logits over f16-rounded K/V`, { skip: backend.skip }, (t) => {
    const session = model.createSession(backend.make('float16'));
    const logits = new Float32Array(200 * V);
    logits.set(session.forward(promptBytes.slice(0, 100), { allLogits: true }));
    for (let p = 100; p < 200; p++) logits.set(session.forward([promptBytes[p]]), p * V);
    const f16Reference = golden.logitsF16KV.values, f32Reference = golden.logits.values;
    let worst = 0, errorF16 = 0, errorF32 = 0;
    for (let i = 0; i < logits.length; i++) {
      const ratio = Math.abs(logits[i] - f16Reference[i]) / (5e-4 * Math.max(1, Math.abs(f16Reference[i])));
      if (!(ratio <= 1)) assert.fail(`f16 K/V: position ${Math.floor(i / V)}, byte ${i % V}: got ${logits[i]}, PyTorch ${f16Reference[i]}`);
      worst = Math.max(worst, ratio);
      errorF16 += Math.abs(logits[i] - f16Reference[i]);
      errorF32 += Math.abs(logits[i] - f32Reference[i]);
    }
    t.diagnostic(`worst |diff| / (5e-4 max(1, |logit|)) = ${worst.toFixed(4)}; mean |diff| to PyTorch f16 K/V ${(errorF16 / logits.length).toExponential(2)}, to f32 K/V ${(errorF32 / logits.length).toExponential(2)}`);
    assert.ok(errorF16 * 10 < errorF32, `mean error to the f16 run (${errorF16 / logits.length}) is not 10 times below that to the f32 run (${errorF32 / logits.length})`);
    session.free();
  });

  for (const [dtype, key] of [['float32', 'f32'], ['float16', 'f16']]) {
    test(`${backend.name} (${dtype} K/V): greedy 128 bytes from each prompt are PyTorch's bytes`, { skip: backend.skip }, () => {
      for (const g of golden.generations) {
        const session = model.createSession(backend.make(dtype));
        const tokens = generate(session, [...new TextEncoder().encode(g.prompt)], golden.generatedBytes, { greedy: true });
        assert.deepEqual(tokens, g[key].tokens, `prompt ${JSON.stringify(g.prompt)}: got ${JSON.stringify(new TextDecoder().decode(Uint8Array.from(tokens)))}, PyTorch ${JSON.stringify(g[key].text)}`);
        session.free();
      }
    });
  }
}

test('attention weights from the runner give PyTorch\'s head scores (heads.json) within 1e-4, and its labels', () => {
  const heads = readTinyGPTHeads(modelDir);
  const { n_layer: L, n_head: H } = model.config;
  /** Sums, per layer and head, weights[h, i, target(i)] over the queries i that have a target. */
  function meanScore(sequences, target) {
    const totals = new Float64Array(L * H);
    let count = 0;
    for (const tokens of sequences) {
      const session = model.createSession(repeatedKvBackend(mha));
      session.forward(tokens, { attentionWeights: true });
      const S = tokens.length;
      session.attentionWeights.forEach(({ weights, kvLength }, layer) => {
        assert.equal(kvLength, S);
        for (let h = 0; h < H; h++) {
          for (let i = 0; i < S; i++) {
            const j = target(i);
            if (j !== null) totals[layer * H + h] += weights[(h * S + i) * S + j];
          }
        }
      });
      for (let i = 0; i < S; i++) if (target(i) !== null) count++;
    }
    return totals.map((t) => t / count);
  }
  const encoder = new TextEncoder();
  const previous = meanScore(heads.previousToken.texts.map((t) => [...encoder.encode(t)]), (i) => (i >= 1 ? i - 1 : null));
  const period = heads.induction.period;
  const induction = meanScore(heads.induction.sequences, (i) => (i >= period ? i - period + 1 : null));
  for (const entry of heads.heads) {
    const at = entry.layer * H + entry.head;
    assert.ok(Math.abs(previous[at] - entry.previousToken) < 1e-4, `layer ${entry.layer} head ${entry.head}: previous-token ${previous[at]} vs PyTorch ${entry.previousToken}`);
    assert.ok(Math.abs(induction[at] - entry.induction) < 1e-4, `layer ${entry.layer} head ${entry.head}: induction ${induction[at]} vs PyTorch ${entry.induction}`);
    const labels = [];
    if (entry.previousToken >= heads.previousToken.threshold) labels.push('previous-token');
    if (entry.induction >= heads.induction.threshold) labels.push('induction');
    assert.deepEqual(entry.labels, labels);
  }
});

test('roundToFloat16 rounds to the nearest binary16, ties to even, overflow to Infinity', () => {
  const values = [];
  for (let bits = 0; bits < 0x7c00; bits++) values.push(float16BitsToFloat32(bits)); // every finite value >= 0
  for (let i = 0; i < values.length; i++) {
    assert.equal(roundToFloat16(values[i]), values[i]);
    assert.equal(roundToFloat16(-values[i]), -values[i]);
    if (i + 1 < values.length) {
      const [a, b] = [values[i], values[i + 1]];
      const even = i % 2 === 0 ? a : b; // the even mantissa (bits i or i+1)
      assert.equal(roundToFloat16(Math.fround((a + b) / 2)), even, `halfway between ${a} and ${b}`);
      const nearA = Math.fround(a + (b - a) * 0.25), nearB = Math.fround(a + (b - a) * 0.75);
      if (nearA !== a) assert.equal(roundToFloat16(nearA), a);
      if (nearB !== b) assert.equal(roundToFloat16(nearB), b);
    }
  }
  assert.equal(roundToFloat16(65504), 65504);
  assert.equal(roundToFloat16(65519.99), 65504);
  assert.equal(roundToFloat16(65520), Infinity);
  assert.equal(roundToFloat16(-1e6), -Infinity);
  assert.ok(Number.isNaN(roundToFloat16(NaN)));
});

test('sampling: the same seed gives the same bytes, greedy takes the first maximum, top-k 1 is greedy', () => {
  const run = (seed) => generate(model.createSession(repeatedKvBackend(mha)), [...new TextEncoder().encode('And ')], 40, { temperature: 1, topK: 20, seed });
  assert.deepEqual(run(7), run(7));
  assert.notDeepEqual(run(7), run(8));
  assert.equal(argmax(Float32Array.of(1, 3, 3, 2)), 1);
  const logits = Float32Array.from({ length: 16 }, (_, i) => Math.sin(i));
  const random = seededRandom(3);
  for (let i = 0; i < 20; i++) assert.equal(sampleToken(logits, { temperature: 1, topK: 1, random }), argmax(logits));
  const counts = new Map();
  for (let i = 0; i < 2000; i++) {
    const tok = sampleToken(logits, { temperature: 1, topK: 3, random });
    counts.set(tok, (counts.get(tok) ?? 0) + 1);
  }
  const top3 = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a]).slice(0, 3);
  assert.deepEqual([...counts.keys()].sort(), [...top3].sort(), 'top-k 3 draws only the 3 largest logits');
});
