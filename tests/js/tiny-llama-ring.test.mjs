// A sliding-window variant of tiny-llama (its weights, config.sliding_window = 16: every layer sees the last
// 16 keys, Mistral's rule) run with ring caches (createSession({ ring: true }), docs/spec.md 5.5): the layers'
// caches hold 15 + 64 tokens however long the text, and the model gives what it gives on plain caches:
// the same greedy bytes over 200 tokens (the rings wrap twice), prefill logits within float32 rounding
// (a prompt longer than one call's 64 tokens goes in slices), the same samples for the same seed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { encodeBytes, generate } from '../../models/lib/generate.mjs';
import { loadLlama } from '../../models/tiny-llama/runner.mjs';
import { readLlamaConfig, readLlamaWeights } from '../../models/tiny-llama/load-node.mjs';

const mha = await createMHA();
const model = loadLlama({ ...readLlamaConfig(), sliding_window: 16 }, readLlamaWeights());
const prompt = encodeBytes('And God said, Let there be light: and there was light. ');

test('sliding-window tiny-llama on ring caches: the greedy bytes and samples of plain caches, past the rings', () => {
  const ring = model.createSession(mha, { ring: true });
  const plain = model.createSession(mha);
  try {
    assert.deepEqual(
      ring.caches.map((c) => [c.ring, c.capacity]),
      ring.caches.map(() => [true, 15 + 64]),
    );
    const tokens = generate(ring, prompt, 200, { greedy: true });
    assert.deepEqual(tokens, generate(plain, prompt, 200, { greedy: true }));
    assert.ok(ring.caches.every((c) => c.length > 2 * c.capacity && c.stored[0] === c.capacity));
    assert.ok(ring.caches[0].bytes * 2.5 < plain.caches[0].bytes); // 79 tokens (3 key panels) against 256
  } finally {
    ring.free();
    plain.free();
  }
  for (const seed of [3, 11]) {
    const [a, b] = [model.createSession(mha, { ring: true }), model.createSession(mha)];
    try {
      assert.deepEqual(generate(a, prompt, 120, { seed }), generate(b, prompt, 120, { seed }), `seed ${seed}`);
    } finally {
      a.free();
      b.free();
    }
  }
});

test('sliding-window tiny-llama on ring caches: a 150-token prompt in slices of 64 gives the plain prefill logits', () => {
  const long = encodeBytes('In the beginning God created the heaven and the earth. '.repeat(3)).slice(0, 150);
  const ring = model.createSession(mha, { ring: true });
  const plain = model.createSession(mha);
  try {
    const got = ring.forward(long, { allLogits: true });
    const want = plain.forward(long, { allLogits: true });
    assert.equal(got.length, want.length);
    let worst = 0;
    for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
    assert.ok(worst < 1e-4, `largest relative difference ${worst}`);
    assert.deepEqual(
      ring.caches.map((c) => c.stored[0]),
      ring.caches.map(() => 15 + 64),
    );
  } finally {
    ring.free();
    plain.free();
  }
});
