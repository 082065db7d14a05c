// Saving a generation and continuing it elsewhere (issue 31): a runner session's saveState (its tokens and
// one cache.save() per layer), restored into another mha-wasm instance without running a token again
// (Llama.restoreSession, TinyGPT.restoreSession with kvCacheBackend), then continued by generate with the
// token the first call chose last: the N + M tokens of one uninterrupted call, bit for bit, with f32 and
// f16 caches (tiny-gpt: every cache dtype), greedy and sampled (`drawn`), and past the context (the refill of
// models/lib/generate.mjs).
// Also the checks of a state that does not fit the model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA, kvCacheDTypes } from '../../dist/index.js';
import { encodeBytes } from '../../models/lib/generate.mjs';
import { generate as generateLlama, generateBatch } from '../../models/tiny-llama/runner.mjs';
import { readLlama } from '../../models/tiny-llama/load-node.mjs';
import { generate as generateGpt } from '../../models/tiny-gpt/runner.mjs';
import { kvCacheBackend } from '../../models/tiny-gpt/attention-backends.mjs';
import { readTinyGPT } from '../../models/tiny-gpt/load-node.mjs';

const mha = await createMHA();
const other = await createMHA(); // the restoring side: nothing of the saving instance's heap is shared
const llama = readLlama();
const gpt = readTinyGPT();
const PROMPT = encodeBytes('And God said, Let there be light: and there was light. And God ');
const LONG = encodeBytes(
  'In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the ',
);

/** N tokens, saveState, restore with `restore(state)`, M more from the pending token; and N + M at once. */
function splitAndWhole({ fresh, restore, generate, prompt, N, M, options }) {
  const first = fresh();
  const head = generate(first, prompt, N, options);
  const state = first.saveState();
  first.free();
  const restored = restore(state);
  const tail = generate(restored, [head.at(-1)], M, { ...options, drawn: N });
  const again = restored.saveState();
  restored.free();
  const whole = fresh();
  const all = generate(whole, prompt, N + M, options);
  whole.free();
  return { split: [...head, ...tail], all, state, again };
}

for (const dtype of kvCacheDTypes) {
  test(`tiny-llama, ${dtype} cache: 30 greedy, save, restore in another instance, 40 more == 70 at once; the restored caches save to the same bytes`, () => {
    const { split, all, state } = splitAndWhole({
      fresh: () => llama.createSession(mha, { dtype }),
      restore: (s) => llama.restoreSession(other, s),
      generate: generateLlama,
      prompt: PROMPT,
      N: 30,
      M: 40,
      options: { greedy: true },
    });
    assert.deepEqual(split, all);
    assert.deepEqual(state.tokens, [[...PROMPT, ...all.slice(0, 29)]]);
    assert.equal(state.caches.length, 4);
    const restored = llama.restoreSession(other, state);
    assert.equal(restored.caches[0].dtype, dtype);
    assert.deepEqual(restored.saveState(), state);
    restored.free();
  });

  test(`tiny-gpt, ${dtype} cache: 30 greedy, save, restore, 40 more == 70 at once, and the attention weights of the last step (K rows read back)`, () => {
    const weightsOf = (session) =>
      session.attentionWeights.map((w) => ({ kvLength: w.kvLength, weights: [...w.weights] }));
    let restoredWeights;
    const { split, all } = splitAndWhole({
      fresh: () => gpt.createSession(kvCacheBackend(mha, { dtype })),
      restore: (s) => gpt.restoreSession(kvCacheBackend(other, { dtype }), s),
      generate: (session, prompt, count, options) => {
        const out = generateGpt(session, prompt, count, { ...options, attentionWeights: true });
        if (options.drawn) restoredWeights = weightsOf(session);
        else session.lastWeights = weightsOf(session);
        return out;
      },
      prompt: PROMPT,
      N: 30,
      M: 40,
      options: { greedy: true },
    });
    assert.deepEqual(split, all);
    // The uninterrupted run's last call, recomputed: the whole 70 on one session
    const whole = gpt.createSession(kvCacheBackend(mha, { dtype }));
    generateGpt(whole, PROMPT, 70, { greedy: true, attentionWeights: true });
    assert.deepEqual(restoredWeights, weightsOf(whole));
    whole.free();
  });
}

test('sampled and past the context: tiny-llama and tiny-gpt, 80 sampled from a 190-byte prompt, save, 60 more (drawn: 80) == 140 at once, both refilled', () => {
  const options = { temperature: 0.8, topK: 40, seed: 5 };
  const llamaRun = splitAndWhole({
    fresh: () => llama.createSession(mha, { dtype: 'float16' }),
    restore: (s) => llama.restoreSession(other, s),
    generate: generateLlama,
    prompt: LONG,
    N: 80,
    M: 60,
    options,
  });
  assert.deepEqual(llamaRun.split, llamaRun.all);
  assert.ok(llamaRun.again.tokens[0].length < LONG.length + 139, 'the context was refilled');
  const gptRun = splitAndWhole({
    fresh: () => gpt.createSession(kvCacheBackend(mha)),
    restore: (s) => gpt.restoreSession(kvCacheBackend(other), s),
    generate: generateGpt,
    prompt: LONG,
    N: 80,
    M: 60,
    options,
  });
  assert.deepEqual(gptRun.split, gptRun.all);
  // a save taken with the context full (256 held) continues with the refill first
  const full = splitAndWhole({
    fresh: () => gpt.createSession(kvCacheBackend(mha)),
    restore: (s) => gpt.restoreSession(kvCacheBackend(other), s),
    generate: generateGpt,
    prompt: LONG,
    N: 67,
    M: 20,
    options,
  });
  assert.equal(full.state.tokens.length, 256);
  assert.deepEqual(full.split, full.all);
});

test('a session left by an earlier call continues too; a ragged batch of two saves, restores and continues as each alone', () => {
  const session = llama.createSession(mha);
  const head = generateLlama(session, PROMPT, 10, { greedy: true });
  const tail = generateLlama(session, [head.at(-1)], 10, { greedy: true });
  session.free();
  const whole = llama.createSession(mha);
  assert.deepEqual([...head, ...tail], generateLlama(whole, PROMPT, 20, { greedy: true }));
  whole.free();

  const prompts = [PROMPT, encodeBytes('Then answered')];
  const batch = llama.createSession(mha, { batch: 2, dtype: 'float16' });
  const heads = generateBatch(batch, prompts, 12, { seed: 2 });
  const restored = llama.restoreSession(other, batch.saveState());
  batch.free();
  assert.deepEqual([...restored.caches[0].lengths], [PROMPT.length + 11, 13 + 11]);
  const tails = generateBatch(
    restored,
    heads.map((h) => [h.at(-1)]),
    8,
    { seed: 2, drawn: 12 },
  );
  restored.free();
  prompts.forEach((prompt, b) => {
    const alone = llama.createSession(mha, { dtype: 'float16' });
    assert.deepEqual([...heads[b], ...tails[b]], generateLlama(alone, prompt, 20, { seed: 2 }), `sequence ${b}`);
    alone.free();
  });
});

test('restoreSession refuses a state that does not fit, naming the function and the parameter; nothing stays allocated', () => {
  const session = llama.createSession(mha, { dtype: 'float16' });
  generateLlama(session, PROMPT, 3, { greedy: true });
  const state = session.saveState();
  session.free();
  const mixed = state.caches.slice();
  const f32 = llama.createSession(mha);
  generateLlama(f32, PROMPT, 3, { greedy: true });
  mixed[3] = f32.saveState().caches[3];
  f32.free();
  const refusals = () => {
    assert.throws(() => llama.restoreSession(other, null), {
      name: 'TypeError',
      message: /^Llama\.restoreSession: state: expected what LlamaSession\.saveState returned, got null$/,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, caches: state.caches.slice(1) }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches: expected 4 \(one per layer\), got 3$/,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, caches: [...state.caches.slice(1), [1, 2]] }), {
      name: 'TypeError',
      message: /^Llama\.restoreSession: state\.caches: expected an array of Uint8Array/,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, tokens: [state.tokens[0].slice(1)] }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches\[0\]: expected lengths \[64\] \(state\.tokens'\), got \[65\]$/,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, tokens: [state.tokens[0], [1]] }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches\[0\]: expected a cache of batch 2/,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, tokens: [[...state.tokens[0].slice(1), 256]] }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.tokens\[0\]\[64\]: expected an integer in \[0, 256\), got 256$/,
    });
    const changed = state.caches.map((c) => c.slice());
    changed[2][100] ^= 1;
    assert.throws(() => llama.restoreSession(other, { ...state, caches: changed }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches\[2\]: loadKVCache: bytes: checksum mismatch/,
    });
    assert.throws(() => llama.restoreSession(other, state, { capacity: 10 }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches\[0\]: loadKVCache: capacity: /,
    });
    assert.throws(() => llama.restoreSession(other, { ...state, caches: mixed }), {
      name: 'RangeError',
      message: /^Llama\.restoreSession: state\.caches\[3\]: expected dtype float16 \(layer 0's\), got float32$/,
    });
  };
  // the second round allocates nothing that stays (the first may grow the instance's staging)
  refusals();
  const before = other.memoryStats().heapBytesInUse;
  refusals();
  assert.equal(other.memoryStats().heapBytesInUse, before);

  const gptSession = gpt.createSession(kvCacheBackend(mha, { dtype: 'float16' }));
  generateGpt(gptSession, PROMPT, 3, { greedy: true });
  const gptState = gptSession.saveState();
  gptSession.free();
  assert.throws(() => gpt.restoreSession(kvCacheBackend(other, { dtype: 'float32' }), gptState), {
    name: 'RangeError',
    message: /^kvCacheBackend: saved\[0\]: expected dtype float32 \(this backend's\), got float16$/,
  });
  assert.throws(
    () =>
      gpt.restoreSession(kvCacheBackend(other, { dtype: 'float16' }), {
        ...gptState,
        tokens: gptState.tokens.slice(1),
      }),
    {
      name: 'RangeError',
      message: /^TinyGPT\.restoreSession: state\.caches: expected caches of 64 tokens \(state\.tokens'\), got 65$/,
    },
  );
  assert.throws(
    () =>
      gpt.restoreSession(kvCacheBackend(other, { dtype: 'float16' }), {
        ...gptState,
        caches: gptState.caches.slice(0, 2),
      }),
    { name: 'RangeError', message: /^kvCacheBackend: saved: expected 4 caches \(one per layer\), got 2$/ },
  );
  assert.throws(() => gpt.restoreSession(kvCacheBackend(other, { dtype: 'float16' }), { tokens: 'abc', caches: [] }), {
    name: 'TypeError',
    message: /^TinyGPT\.restoreSession: state\.tokens: expected an array of token ids, got string$/,
  });
  assert.throws(
    () =>
      gpt.restoreSession(kvCacheBackend(other, { dtype: 'float16' }), {
        ...gptState,
        caches: [gptState.caches[0], ...llamaCachesOfBatch2()],
      }),
    {
      name: 'RangeError',
      message: /^kvCacheBackend: saved\[1\]: expected a cache of batch 1 \(one sequence\), got batch 2$/,
    },
  );
  assert.equal(other.memoryStats().heapBytesInUse, before);
  assert.throws(() => gpt.createSession(() => ({ length: () => 0, free() {} })).saveState(), {
    name: 'TypeError',
    message: /^Session\.saveState: this attention backend cannot save its K\/V/,
  });
});

/** Three float16 caches of batch 2 (a shape tiny-gpt's backend must refuse). */
function llamaCachesOfBatch2() {
  const batch = llama.createSession(mha, { batch: 2, dtype: 'float16' });
  generateBatch(batch, [PROMPT, PROMPT], 2, { greedy: true });
  const { caches } = batch.saveState();
  batch.free();
  return caches.slice(0, 3);
}
