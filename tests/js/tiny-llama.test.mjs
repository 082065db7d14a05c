// tiny-llama (models/tiny-llama) run by the Llama runner on mha-wasm, against PyTorch's golden data
// (models/tiny-llama/golden, made by make_golden.py): logits at every prefill position and at 100 decode
// steps, greedy generations token for token, with f32 and f16 KV caches; prompts of different lengths
// decoded together in one ragged cache; the loader on F32 and BF16 checkpoints, an untied lm_head, q/k/v
// biases and a sliding window (checkpoints made from tiny-llama's in memory); and a random Qwen2-style
// checkpoint against PyTorch (golden/qwen2-fixture, make_fixture.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createMHA } from '../../dist/index.js';
import { bfloat16BitsToFloat32, parseSafetensors } from '../../models/lib/safetensors.mjs';
import { encodeBytes } from '../../models/lib/generate.mjs';
import { generate, generateBatch, loadLlama } from '../../models/tiny-llama/runner.mjs';
import {
  TOLERANCE,
  checkGreedy,
  checkPrefillAndSteps,
  checkRaggedBatch,
} from '../../models/tiny-llama/golden-check.mjs';
import {
  readLlama,
  readLlamaConfig,
  readLlamaWeights,
  readTinyLlamaGolden,
  tinyLlamaDir,
} from '../../models/tiny-llama/load-node.mjs';
import { compareLogits } from '../../models/lib/golden.mjs';
import { repoRoot } from './helpers.mjs';

const mha = await createMHA();
const config = readLlamaConfig();
const weights = readLlamaWeights();
const model = loadLlama(config, weights);
const golden = await readTinyLlamaGolden();
const V = config.vocab_size;

// The ragged cache (docs/spec.md 4.6: per-sequence lengths, `newTokens`) is in the core when a cache
// has `lengths`; before that, the batch tests are skipped, saying why.
const probe = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 2, capacity: 1 });
const ragged =
  probe.lengths instanceof Int32Array ? false : 'the KV cache has no per-sequence lengths yet (docs/spec.md 4.6)';
probe.free();

test('golden data matches the model it was made from', () => {
  const P = encodeBytes(golden.prompt).length;
  for (const run of Object.values(golden.runs)) {
    assert.equal(run.tokens.length, golden.decodeSteps);
    assert.deepEqual(run.shape, [P + golden.decodeSteps, V]);
    assert.equal(run.values.length, (P + golden.decodeSteps) * V);
  }
  assert.ok(P + golden.decodeSteps <= config.max_position_embeddings);
  for (const g of golden.generations)
    for (const key of ['f32', 'f16']) assert.equal(g[key].tokens.length, golden.generatedTokens);
});

for (const dtype of ['float32', 'float16']) {
  test(`${dtype} KV cache: prefill of the prompt, then 100 decode steps, give PyTorch's logits at every position`, (t) => {
    const result = checkPrefillAndSteps(model, mha, golden, dtype);
    assert.ok(result.ok, result.message);
    t.diagnostic(
      `worst |diff| = ${result.worstAbs.toExponential(2)}, worst |diff| / allowed = ${result.worst.toFixed(4)} (tolerance ${TOLERANCE[dtype]} * max(1, |logit|))` +
        (result.meanOwn === undefined
          ? ''
          : `; mean |diff| to PyTorch with this K/V dtype ${result.meanOwn.toExponential(2)}, with the other ${result.meanOther.toExponential(2)}`),
    );
  });

  test(`${dtype} KV cache: greedy generations from the 4 golden prompts are PyTorch's tokens`, () => {
    const result = checkGreedy(model, mha, golden, dtype);
    assert.ok(result.ok, result.message);
  });

  test(
    `${dtype} KV cache: the 4 prompts of different lengths, prefilled and decoded together in one ragged cache, give PyTorch's logits and tokens`,
    { skip: ragged },
    (t) => {
      const result = checkRaggedBatch(model, mha, golden, dtype);
      assert.ok(result.ok, result.message);
      t.diagnostic(`ragged prefill, first prompt: worst |diff| = ${result.worstAbs.toExponential(2)}`);
    },
  );
}

test(
  'ragged batch past the context: each sequence drops its older half when it is full, while the others step, as it would alone',
  { skip: ragged },
  () => {
    // Prompts of 17 and 87 bytes reach the 256-token context at different steps: each refill is a ragged
    // call of 129 rows for one sequence and 1 for the other, after truncate([0, n]) or truncate([n, 0])
    const prompts = [golden.generations[0].prompt, golden.generations[2].prompt].map(encodeBytes);
    const count = 300,
      options = { temperature: 0.8, topK: 40, seed: 9 };
    const session = model.createSession(mha, { batch: 2, dtype: 'float16' });
    const together = generateBatch(session, prompts, count, options);
    session.free();
    prompts.forEach((p, b) => {
      const alone = model.createSession(mha, { dtype: 'float16' });
      assert.deepEqual(together[b], generate(alone, p, count, options), `prompt ${b}`);
      alone.free();
    });
  },
);

// ---------------------------------------------------------------------------------------------------
// The loader, on checkpoints derived from tiny-llama's in memory
// ---------------------------------------------------------------------------------------------------

/** float32 -> the bfloat16 bits of its round to nearest even (finite inputs). */
function bfloat16Bits(x) {
  const bits = new Uint32Array(Float32Array.of(x).buffer)[0];
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** A safetensors file of name -> {shape, data (Float32Array)}, each tensor written as `dtype` (F32 or BF16). */
function writeSafetensors(tensors, dtype) {
  const width = dtype === 'F32' ? 4 : 2;
  const header = {};
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + width * t.data.length] };
    offset += width * t.data.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);
  const bytes = new Uint8Array(8 + json.length + offset);
  const view = new DataView(bytes.buffer);
  view.setBigUint64(0, BigInt(json.length), true);
  bytes.set(new TextEncoder().encode(json), 8);
  let at = 8 + json.length;
  for (const t of tensors.values()) {
    for (const x of t.data) {
      if (dtype === 'F32') view.setFloat32(at, x, true);
      else view.setUint16(at, bfloat16Bits(x), true);
      at += width;
    }
  }
  return bytes.buffer;
}

const baseTensors = parseSafetensors(weights);
const prompt = encodeBytes(golden.prompt);

/** All logits (P, V) of one prefill of the golden prompt, f32 cache. */
function prefillLogits(m, tokens = prompt) {
  const session = m.createSession(mha);
  try {
    return session.forward(tokens, { allLogits: true });
  } finally {
    session.free();
  }
}
const baseLogits = prefillLogits(model);

test('bfloat16 bits decode to the float32 they are the top half of', () => {
  for (const [bits, value] of [
    [0x3f80, 1],
    [0xbf80, -1],
    [0x4049, 3.140625],
    [0x0000, 0],
    [0x7f80, Infinity],
    [0xff80, -Infinity],
    [0x0001, 2 ** -133],
  ]) {
    assert.equal(bfloat16BitsToFloat32(bits), value);
  }
  assert.ok(Number.isNaN(bfloat16BitsToFloat32(0x7fc0)));
  for (let bits = 0; bits < 0x10000; bits += 97) {
    if ((bits & 0x7f80) === 0x7f80 && bits & 0x7f) continue; // NaN payloads need not survive float32
    assert.equal(bfloat16Bits(bfloat16BitsToFloat32(bits)), bits, `bits ${bits}`);
  }
});

test('the loader reads an F32 checkpoint of the F16 weights widened: the same logits, bit for bit', () => {
  const f32 = parseSafetensors(writeSafetensors(baseTensors, 'F32'));
  for (const [name, t] of f32) assert.equal(t.dtype, 'F32', name);
  assert.deepEqual(prefillLogits(loadLlama(config, writeSafetensors(baseTensors, 'F32'))), baseLogits);
});

test('the loader reads a BF16 checkpoint: the logits of the same bf16-rounded weights stored as F32', () => {
  const rounded = new Map(
    [...baseTensors].map(([name, t]) => [
      name,
      { shape: t.shape, data: t.data.map((x) => bfloat16BitsToFloat32(bfloat16Bits(x))) },
    ]),
  );
  const fromBf16 = prefillLogits(loadLlama(config, writeSafetensors(baseTensors, 'BF16')));
  assert.deepEqual(fromBf16, prefillLogits(loadLlama(config, writeSafetensors(rounded, 'F32'))));
  // bf16 keeps 8 of f16's 11 significant bits: close to the f16 model's logits, not equal
  let worst = 0;
  for (let i = 0; i < baseLogits.length; i++) worst = Math.max(worst, Math.abs(fromBf16[i] - baseLogits[i]));
  assert.ok(worst > 0 && worst < 1, `bf16 vs f16 weights: worst |diff| ${worst}`);
});

test('an untied lm_head, zero q/k/v biases and a window wider than the text change nothing; a narrow window does', () => {
  const tensors = new Map(baseTensors);
  tensors.set('lm_head.weight', baseTensors.get('model.embed_tokens.weight'));
  const { hidden_size: D, num_attention_heads: H, num_key_value_heads: Hkv } = config;
  const Dh = D / H;
  for (let i = 0; i < config.num_hidden_layers; i++) {
    for (const [proj, width] of [
      ['q', H * Dh],
      ['k', Hkv * Dh],
      ['v', Hkv * Dh],
    ]) {
      tensors.set(`model.layers.${i}.self_attn.${proj}_proj.bias`, { shape: [width], data: new Float32Array(width) });
    }
  }
  const buffer = writeSafetensors(tensors, 'F32');
  const qwenLike = { ...config, architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', tie_word_embeddings: false };
  assert.deepEqual(
    prefillLogits(loadLlama({ ...qwenLike, sliding_window: prompt.length, use_sliding_window: true }, buffer)),
    baseLogits,
  );
  const narrow = prefillLogits(loadLlama({ ...qwenLike, sliding_window: 8, use_sliding_window: true }, buffer));
  const V8 = 8 * V; // the first 8 positions see all their keys through a window of 8
  assert.deepEqual(narrow.subarray(0, V8), baseLogits.subarray(0, V8));
  assert.notDeepEqual(narrow.subarray(V8), baseLogits.subarray(V8));
  assert.throws(
    () => loadLlama({ ...config, tie_word_embeddings: false }, weights),
    /llama: model.safetensors has no tensor lm_head.weight/,
  );
});

test("a Qwen2-style checkpoint (BF16, q/k/v biases, untied lm_head, head_dim * heads != hidden, theta 1e6, a window of 8 on layer 1): PyTorch's logits", (t) => {
  // golden/qwen2-fixture, made by make_fixture.py with make_golden.py's forward pass
  const dir = path.join(tinyLlamaDir, 'golden', 'qwen2-fixture');
  const index = JSON.parse(fs.readFileSync(path.join(dir, 'index.json'), 'utf8'));
  const bytes = fs.readFileSync(path.join(dir, index.file));
  const reference = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const fixture = readLlama(dir);
  const tokens = encodeBytes(index.prompt),
    [S, Vf] = index.shape;
  assert.equal(tokens.length, S);
  const worst = [];
  for (const dtype of ['float32', 'float16']) {
    // float16: the window and rope path with rounded K/V, against the f32 reference at a loose bound
    const tolerance = dtype === 'float32' ? 1e-4 : 2e-2;
    const full = fixture.createSession(mha, { dtype });
    const result = compareLogits(full.forward(tokens, { allLogits: true }), reference, 0, S, Vf, tolerance);
    full.free();
    assert.ok(result.ok, `${dtype}, full prefill: ${result.message}`);
    const split = fixture.createSession(mha, { dtype });
    const parts = [
      compareLogits(split.forward(tokens.slice(0, 13), { allLogits: true }), reference, 0, 13, Vf, tolerance),
    ];
    for (let i = 13; i < S; i++) parts.push(compareLogits(split.forward([tokens[i]]), reference, i, 1, Vf, tolerance));
    split.free();
    const failed = parts.find((r) => !r.ok);
    assert.ok(!failed, `${dtype}, prefill(13) + steps: ${failed?.message}`);
    worst.push(`${dtype} ${Math.max(result.worstAbs, ...parts.map((r) => r.worstAbs)).toExponential(2)}`);
  }
  t.diagnostic(`worst |diff|: ${worst.join(', ')} (the window moves logits by up to ${index.windowMaxAbsEffect})`);
});

test('the loader names what is wrong: config fields, tensor shapes, dtypes', () => {
  assert.throws(() => loadLlama({ ...config, hidden_act: 'gelu' }, weights), {
    name: 'RangeError',
    message: /config.hidden_act: expected silu, got gelu/,
  });
  assert.throws(() => loadLlama({ ...config, num_key_value_heads: 3 }, weights), {
    name: 'RangeError',
    message: /num_key_value_heads: expected a divisor of num_attention_heads = 8, got 3/,
  });
  assert.throws(() => loadLlama({ ...config, rope_scaling: { type: 'yarn' } }, weights), /rope_scaling: expected null/);
  assert.throws(
    () => loadLlama({ ...config, intermediate_size: 512 }, weights),
    /mlp.gate_proj.weight: expected shape \[512,256\], got \[704,256\]/,
  );
  const i64 = new Map([['x', { shape: [1], data: new Float32Array(2) }]]);
  const buffer = new Uint8Array(writeSafetensors(i64, 'F32'));
  const text = new TextDecoder().decode(buffer).replace('"F32"', '"I64"');
  assert.throws(() => parseSafetensors(new TextEncoder().encode(text).buffer), {
    name: 'TypeError',
    message: /x: expected dtype F32, F16 or BF16, got I64/,
  });
});

// ---------------------------------------------------------------------------------------------------
// examples/generate.mjs --model models/tiny-llama
// ---------------------------------------------------------------------------------------------------

const script = path.join(repoRoot, 'examples/generate.mjs');
const run = (...args) =>
  JSON.parse(execFileSync(process.execPath, [script, '--model', tinyLlamaDir, ...args], { encoding: 'utf8' }));

test("generate.mjs --model models/tiny-llama --greedy --json prints PyTorch's greedy tokens (f32 and f16 cache)", () => {
  const g = golden.generations[1];
  for (const [cache, key] of [
    ['f32', 'f32'],
    ['f16', 'f16'],
  ]) {
    const result = run('--prompt', g.prompt, '--tokens', '40', '--greedy', '--json', '--cache', cache);
    assert.deepEqual(Object.keys(result).sort(), ['text', 'tokens']);
    assert.deepEqual(result.tokens, g[key].tokens.slice(0, 40));
  }
});

test(
  "generate.mjs with several --prompt: one ragged batch, each prompt's output what it gives alone",
  { skip: ragged },
  () => {
    const prompts = [golden.generations[0].prompt, golden.generations[2].prompt, golden.generations[1].prompt];
    const together = run(...prompts.flatMap((p) => ['--prompt', p]), '--tokens', '30', '--json', '--seed', '4');
    assert.equal(together.length, 3);
    prompts.forEach((p, b) =>
      assert.deepEqual(together[b], run('--prompt', p, '--tokens', '30', '--json', '--seed', '4'), `prompt ${b}`),
    );
  },
);
