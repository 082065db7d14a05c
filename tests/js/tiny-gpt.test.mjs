// tiny-gpt (models/tiny-gpt) run by the JS runner on mha-wasm, against PyTorch's golden data
// (models/tiny-gpt/golden, made by make_golden.py): logits at every position, prefill + single steps, and
// greedy generations byte for byte. TINY_GPT_DIR points the test at another model folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { argmax, float16BitsToFloat32, generate, sampleToken } from '../../models/tiny-gpt/runner.mjs';
import {
  checkF16Steps,
  checkFullPrefill,
  checkGreedy,
  checkSplitPrefill,
  compareLogits,
  goldenPromptBytes,
} from '../../models/tiny-gpt/golden-check.mjs';
import { kvCacheBackend } from '../../models/tiny-gpt/attention-backends.mjs';
import { roundToFloat16 } from '../../scripts/lib/float16.mjs';
import { headScores, inductionTargets } from '../../models/tiny-gpt/head-scores.mjs';
import { readTinyGPT, readTinyGPTGolden, readTinyGPTHeads, tinyGptDir } from '../../models/tiny-gpt/load-node.mjs';
import { mulberry32 } from './helpers.mjs';

const modelDir = process.env.TINY_GPT_DIR ?? tinyGptDir;
const mha = await createMHA();
const model = readTinyGPT(modelDir);
const golden = await readTinyGPTGolden(modelDir);
const V = model.config.vocab_size;
const backend = (dtype = 'float32') => kvCacheBackend(mha, { dtype });

/** Asserts a golden-check.mjs result and reports its worst |diff| / allowed. */
function assertCheck(t, result) {
  assert.ok(result.ok, result.message);
  t.diagnostic(
    `worst |diff| / allowed = ${result.worst.toFixed(4)}${result.meanF16 === undefined ? '' : `; mean |diff| to PyTorch f16 K/V ${result.meanF16.toExponential(2)}, to f32 K/V ${result.meanF32.toExponential(2)}`}`,
  );
}

test('golden data matches the model it was made from', () => {
  assert.deepEqual(golden.logits.shape, [200, V]);
  assert.equal(goldenPromptBytes(golden).length, 200);
  assert.equal(golden.logits.values.length, 200 * V);
  assert.equal(golden.generations.length, 3);
  for (const g of golden.generations)
    for (const key of ['f32', 'f16']) assert.equal(g[key].tokens.length, golden.generatedBytes);
});

test('the checker fails on logits that are off by more than the tolerance, naming the position', () => {
  const reference = golden.logits.values.subarray(0, 2 * V);
  const off = Float32Array.from(reference);
  off[V + 3] += 2e-4 * Math.max(1, Math.abs(off[V + 3]));
  assert.equal(compareLogits(reference, reference, 0, 2, V).ok, true);
  const result = compareLogits(off, reference, 0, 2, V);
  assert.equal(result.ok, false);
  assert.match(result.message, /^position 1, byte 3: /);
  assert.equal(compareLogits(off.subarray(1), reference, 0, 2, V).ok, false);
});

test("createKVCache: full prefill of the 200-byte prompt gives PyTorch's logits at every position", (t) => {
  assertCheck(t, checkFullPrefill(model, backend(), golden));
});

test("createKVCache: prefill of 100 bytes then 100 single-byte steps gives PyTorch's logits", (t) => {
  assertCheck(t, checkSplitPrefill(model, backend(), golden, [100, 1]));
});

test("createKVCache: prefill of 50 bytes, then of 150 more at once, gives PyTorch's logits", (t) => {
  assertCheck(t, checkSplitPrefill(model, backend(), golden, [50, 150]));
});

test("createKVCache (float16 K/V): prefill(100) + 100 steps gives PyTorch's logits over f16-rounded K/V", (t) => {
  assertCheck(t, checkF16Steps(model, backend('float16'), golden));
});

for (const [dtype, key] of [
  ['float32', 'f32'],
  ['float16', 'f16'],
]) {
  test(`createKVCache (${dtype} K/V): greedy 128 bytes from each prompt are PyTorch's bytes`, () => {
    const result = checkGreedy(model, () => backend(dtype), golden, key);
    assert.ok(result.ok, result.message);
  });
}

test("attention weights from the runner give PyTorch's head scores (heads.json) within 1e-4, and its labels", () => {
  const heads = readTinyGPTHeads(modelDir);
  const { n_layer: L, n_head: H } = model.config;
  /** The layers' weights of one prefill of tokens. */
  function attend(tokens) {
    const session = model.createSession(kvCacheBackend(mha));
    try {
      session.forward(tokens, { attentionWeights: true });
      for (const { kvLength } of session.attentionWeights) assert.equal(kvLength, tokens.length);
      return session.attentionWeights;
    } finally {
      session.free();
    }
  }
  const encoder = new TextEncoder();
  const previous = headScores(
    heads.previousToken.texts.map((t) => [...encoder.encode(t)]),
    attend,
    L,
    H,
  ).previousToken;
  const period = heads.induction.period;
  for (const tokens of heads.induction.sequences) {
    // the generic target is heads.json's i - period + 1 here
    assert.deepEqual(
      inductionTargets(tokens),
      tokens.map((_, i) => (i >= period ? i - period + 1 : -1)),
    );
  }
  const induction = headScores(heads.induction.sequences, attend, L, H).induction;
  for (const entry of heads.heads) {
    const at = entry.layer * H + entry.head;
    assert.ok(
      Math.abs(previous[at] - entry.previousToken) < 1e-4,
      `layer ${entry.layer} head ${entry.head}: previous-token ${previous[at]} vs PyTorch ${entry.previousToken}`,
    );
    assert.ok(
      Math.abs(induction[at] - entry.induction) < 1e-4,
      `layer ${entry.layer} head ${entry.head}: induction ${induction[at]} vs PyTorch ${entry.induction}`,
    );
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
      const nearA = Math.fround(a + (b - a) * 0.25),
        nearB = Math.fround(a + (b - a) * 0.75);
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
  const run = (seed) => {
    const session = model.createSession(kvCacheBackend(mha));
    const tokens = generate(session, [...new TextEncoder().encode('And ')], 40, { temperature: 1, topK: 20, seed });
    session.free();
    return tokens;
  };
  assert.deepEqual(run(7), run(7));
  assert.notDeepEqual(run(7), run(8));
  assert.equal(argmax(Float32Array.of(1, 3, 3, 2)), 1);
  const logits = Float32Array.from({ length: 16 }, (_, i) => Math.sin(i));
  const random = mulberry32(3);
  for (let i = 0; i < 20; i++) assert.equal(sampleToken(logits, { temperature: 1, topK: 1, random }), argmax(logits));
  const counts = new Map();
  for (let i = 0; i < 2000; i++) {
    const tok = sampleToken(logits, { temperature: 1, topK: 3, random });
    counts.set(tok, (counts.get(tok) ?? 0) + 1);
  }
  const top3 = Array.from(logits.keys())
    .sort((a, b) => logits[b] - logits[a])
    .slice(0, 3);
  assert.deepEqual([...counts.keys()].sort(), [...top3].sort(), 'top-k 3 draws only the 3 largest logits');
});
