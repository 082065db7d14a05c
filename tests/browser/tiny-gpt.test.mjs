// The demo's real-model view (web/demo/model-view.js + model-worker.js) in headless Chromium, served the
// way `npm start` serves it (scripts/serve.mjs, repository root): it generates the bytes the Node runner
// generates, draws every layer x head row and a head's pattern, labels the training run's heads with live
// scores, keeps the weights in the browser cache, fits 390 px; and in the page's Worker, the PyTorch checks
// of models/tiny-gpt/golden-check.mjs (the Node test's checker). Assumes dist/ is built.
//
//   node --test tests/browser/tiny-gpt.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createMHA } from '../../dist/index.js';
import { generate } from '../../models/tiny-gpt/runner.mjs';
import { kvCacheBackend } from '../../models/tiny-gpt/attention-backends.mjs';
import { readTinyGPT } from '../../models/tiny-gpt/load-node.mjs';
import { canvasStats, chromiumAndServer } from './suites.mjs';

const RESULTS = fileURLToPath(new URL('../../test-results/', import.meta.url));

const harness = chromiumAndServer({ before, after });

/** Opens the demo, records console errors, page errors and failed responses, waits for the model. */
async function openRealModel(t, context) {
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console.error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  await page.goto(new URL('web/demo/', harness.server.url).href);
  await page.waitForSelector('#real-model[data-state="ready"]', { timeout: 30_000 });
  return { page, problems };
}

async function generateInPage(page, { count, cache = 'float32' }) {
  await page.fill('#real-count', String(count));
  await page.selectOption('#real-cache', cache);
  await page.click('#real-run');
  await page.waitForSelector('#real-model[data-state="done"]', { timeout: 30_000 });
  await page.waitForFunction(
    (n) =>
      document.getElementById('real-text-generated').textContent.length > 0 &&
      document.getElementById('real-model').dataset.generated === String(n),
    count,
  );
}

test("generates the Node runner's greedy bytes token by token, draws 4 x 8 head rows and a head's pattern, labels L0 H4; no console errors", async (t) => {
  const context = await harness.browser.newContext({ viewport: { width: 1280, height: 900 } });
  t.after(() => context.close());
  const { page, problems } = await openRealModel(t, context);
  const prompt = await page.inputValue('#real-prompt');
  await generateInPage(page, { count: 120 });

  const mha = await createMHA();
  const session = readTinyGPT().createSession(kvCacheBackend(mha));
  const expected = new TextDecoder().decode(
    Uint8Array.from(generate(session, [...new TextEncoder().encode(prompt)], 120, { greedy: true })),
  );
  session.free();
  assert.equal(await page.textContent('#real-text-generated'), expected);
  assert.equal(await page.textContent('#real-text-prompt'), prompt);

  const rows = await canvasStats(page, '#real-heads canvas.head-row');
  assert.equal(rows.length, 32);
  for (const [i, r] of rows.entries())
    assert.ok(r.nonWhite > r.total / 2 && r.colors >= 3, `head row ${i} is blank or flat: ${JSON.stringify(r)}`);
  const [detail] = await canvasStats(page, '#real-detail-canvas');
  assert.ok(
    detail.nonWhite > detail.total / 2 && detail.colors > 20,
    `the detail pattern is blank: ${JSON.stringify(detail)}`,
  );

  for (const id of ['real-rate', 'real-attention-rate'])
    assert.match(await page.textContent(`#${id}`), /^[\d,]+ tokens\/s$/, id);
  assert.match(await page.textContent('#real-share'), /^\d+\.\d %$/);
  // The training run's one labelled head, and its live score beside the label
  const labelled = page.locator('.head-btn[data-layer="0"][data-head="4"]');
  assert.equal(await labelled.locator('.badge').textContent(), 'previous-token');
  const [prev] = (await labelled.locator('.head-score').textContent()).match(/\d\.\d{3}/);
  assert.ok(Number(prev) > 0.4, `L0 H4 previous-token score over the text: ${prev}`);
  assert.equal(await page.locator('.badge').count(), 1);
  const before = await page.$eval('#real-model', (s) => Number(s.dataset.draws));
  await page.click('.head-btn[data-layer="2"][data-head="3"]');
  await page.waitForFunction((n) => Number(document.getElementById('real-model').dataset.draws) > n, before);
  assert.match(await page.textContent('#real-detail-title'), /^Layer 2, head 3 \(KV head 0\)$/);
  assert.equal(await page.getAttribute('.head-btn[data-layer="2"][data-head="3"]', 'aria-pressed'), 'true');
  await mkdir(RESULTS, { recursive: true });
  await page.locator('#real-model').screenshot({ path: `${RESULTS}tiny-gpt-1280.png` });
  // heads.json's previous-token scores recomputed in the page on its sentences (the induction ones follow
  // on 960 more bytes; tests/js/tiny-gpt.test.mjs checks both through the same head-scores.mjs)
  await page.click('.head-btn[data-layer="0"][data-head="4"]');
  await page.waitForFunction(() => /^Layer 0, head 4/.test(document.getElementById('real-detail-title').textContent));
  assert.match(await page.textContent('#real-detail-note'), /test sentences not recomputed here yet, PyTorch 0\.718/);
  await page.click('#real-verify');
  await page.waitForFunction(
    () => /sentences \d\.\d{3} recomputed here/.test(document.getElementById('real-detail-note').textContent),
    null,
    { timeout: 30_000 },
  );
  const [, here, pytorch] = (await page.textContent('#real-detail-note')).match(
    /sentences (\d\.\d{3}) recomputed here, PyTorch (\d\.\d{3})/,
  );
  assert.ok(Math.abs(Number(here) - Number(pytorch)) <= 0.001, `recomputed ${here} vs PyTorch ${pytorch}`);
  assert.deepEqual(problems, []);
});

test('the weights are downloaded once: a second visit revalidates them with a 304 (ETag), 390 px wide with an f16 cache', async (t) => {
  const weightsUrl = new URL('models/tiny-gpt/model.safetensors', harness.server.url);
  const first = await fetch(weightsUrl);
  await first.arrayBuffer();
  const etag = first.headers.get('etag');
  assert.match(etag, /^W\/"[0-9a-f]+-[0-9a-f]+"$/);
  assert.equal(first.headers.get('cache-control'), 'no-cache');
  const again = await fetch(weightsUrl, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  assert.equal((await again.arrayBuffer()).byteLength, 0);

  const context = await harness.browser.newContext({ viewport: { width: 390, height: 844 } });
  t.after(() => context.close());
  const visit1 = await openRealModel(t, context);
  assert.ok(
    Number(await visit1.page.$eval('#real-model', (s) => s.dataset.transferBytes)) > 5e6,
    'the first visit downloads the weights',
  );
  await visit1.page.close();
  const { page, problems } = await openRealModel(t, context);
  const transfer = Number(await page.$eval('#real-model', (s) => s.dataset.transferBytes));
  assert.ok(transfer < 5000, `the second visit moved ${transfer} bytes for the weights`);
  assert.match(await page.textContent('#real-status'), /weights from the browser cache/);

  // Stop: a fresh Worker, the bytes so far stay, and the next generation runs
  await page.fill('#real-count', '190');
  await page.click('#real-run');
  await page.waitForFunction(() => Number(document.getElementById('real-model').dataset.generated) >= 3);
  assert.equal(await page.textContent('#real-run'), 'Stop');
  await page.click('#real-run');
  await page.waitForSelector('#real-model[data-state="ready"]', { timeout: 30_000 });
  const stoppedAt = Number(await page.$eval('#real-model', (s) => s.dataset.generated));
  assert.ok(stoppedAt >= 3 && stoppedAt < 190, `stopped after ${stoppedAt} bytes`);
  assert.equal(await page.textContent('#real-run'), 'Generate');
  await generateInPage(page, { count: 40, cache: 'float16' });
  const width = await page.evaluate(() => document.scrollingElement.scrollWidth);
  assert.ok(width <= 390, `page is ${width}px wide at a 390px viewport`);
  const right = await page.$$eval('#real-model canvas', (cs) =>
    Math.max(...cs.map((c) => c.getBoundingClientRect().right)),
  );
  assert.ok(right <= 390, `a canvas reaches x = ${right}`);
  const rows = await canvasStats(page, '#real-heads canvas.head-row');
  assert.ok(
    rows.every((r) => r.nonWhite > r.total / 2),
    'every head row is drawn at 390 px',
  );
  await page.locator('#real-model').screenshot({ path: `${RESULTS}tiny-gpt-390.png` });
  assert.deepEqual(problems, []);
});

test("in the page's Worker: PyTorch's logits at every position (prefill(200), prefill(100) + 100 steps, f16 K/V) and greedy bytes (f32, f16)", async (t) => {
  const context = await harness.browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  await page.goto(new URL('models/tiny-gpt/config.json', harness.server.url).href); // same origin, no demo running beside it
  const results = await page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const worker = new Worker('/web/demo/model-worker.js', { type: 'module' });
        worker.onerror = (e) => reject(new Error(e.message));
        worker.onmessage = ({ data }) => {
          if (data.type === 'loaded') worker.postMessage({ type: 'golden' });
          else if (data.type === 'golden') {
            worker.terminate();
            resolve(data.results);
          } else if (data.type === 'error') reject(new Error(data.message));
        };
        worker.postMessage({ type: 'load' });
      }),
  );
  assert.deepEqual(Object.keys(results), ['fullPrefill', 'steps', 'f16Steps', 'greedyF32', 'greedyF16']);
  for (const [name, result] of Object.entries(results)) {
    assert.ok(result.ok, `${name}: ${result.message}`);
    assert.ok(result.worst <= 1, `${name}: worst ${result.worst}`);
  }
  t.diagnostic(
    `worst |diff| / allowed: prefill ${results.fullPrefill.worst.toFixed(3)}, steps ${results.steps.worst.toFixed(3)}, f16 ${results.f16Steps.worst.toFixed(3)}`,
  );
});
