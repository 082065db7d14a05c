// tiny-llama (models/tiny-llama) in headless Chromium, served the way `npm start` serves the repository
// (scripts/serve.mjs): in a page, the Llama runner fetches the checkpoint (fetchLlama) and runs the PyTorch
// checks of models/tiny-llama/golden-check.mjs, the Node test's checker: logits at every prefill position
// and 100 decode steps, greedy tokens, f32 and f16 KV caches, and the ragged batch once the core has it.
// Assumes dist/ is built.
//
//   node --test tests/browser/tiny-llama.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chromiumAndServer } from './suites.mjs';

const harness = chromiumAndServer({ before, after });

test("in a page: PyTorch's logits at every position (prefill + 100 steps) and greedy tokens, f32 and f16 KV caches, and the ragged batch", async (t) => {
  const context = await harness.browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  await page.goto(new URL('models/tiny-llama/config.json', harness.server.url).href); // same origin, nothing else running
  const results = await page.evaluate(async () => {
    const { createMHA } = await import('/dist/index.js');
    const { fetchLlama } = await import('/models/tiny-llama/runner.mjs');
    const check = await import('/models/tiny-llama/golden-check.mjs');
    const mha = await createMHA();
    const folder = new URL('/models/tiny-llama/', location.href);
    const [model, golden] = await Promise.all([fetchLlama(folder), check.fetchGolden(folder)]);
    const probe = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 2, capacity: 1 });
    const ragged = probe.lengths instanceof Int32Array;
    probe.free();
    const out = {};
    for (const dtype of ['float32', 'float16']) {
      out[`steps ${dtype}`] = check.checkPrefillAndSteps(model, mha, golden, dtype);
      out[`greedy ${dtype}`] = check.checkGreedy(model, mha, golden, dtype);
      if (ragged) out[`ragged ${dtype}`] = check.checkRaggedBatch(model, mha, golden, dtype);
    }
    // plain objects across the page boundary
    return Object.fromEntries(
      Object.entries(out).map(([k, r]) => [
        k,
        { ok: r.ok, worst: r.worst, worstAbs: r.worstAbs ?? null, message: r.message },
      ]),
    );
  });
  for (const [name, result] of Object.entries(results)) {
    assert.ok(result.ok, `${name}: ${result.message}`);
    assert.ok(result.worst <= 1, `${name}: worst ${result.worst}`);
  }
  assert.deepEqual(problems, []);
  const steps = (d) => results[`steps ${d}`];
  t.diagnostic(
    `worst |diff|: f32 cache ${steps('float32').worstAbs.toExponential(2)} (${steps('float32').worst.toFixed(3)} of allowed), ` +
      `f16 cache ${steps('float16').worstAbs.toExponential(2)} (${steps('float16').worst.toFixed(3)} of allowed)` +
      `${results['ragged float32'] ? '' : '; ragged batch not checked: the KV cache has no per-sequence lengths yet'}`,
  );
});
