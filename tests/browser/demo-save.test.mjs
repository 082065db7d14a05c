// The demo's real-model view with its model picker and its saved conversations (web/demo/model-view.js,
// real-model-save.js, saved-conversations.js, model-worker.js) in headless Chromium, served as `npm
// start` serves it: tiny-llama and tiny-gpt picked in turn; N greedy bytes, Save (IndexedDB), a reload,
// "Continue saved conversation" for M more: the N + M bytes one uninterrupted generation gives in the page
// and in the Node runner, with no prefill after the reload (the Worker ran one token per new byte); a
// record of an older format is ignored with a message. Assumes dist/ is built.
//
//   node --test tests/browser/demo-save.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { decodeBytes, encodeBytes } from '../../models/lib/generate.mjs';
import { generate as generateLlama } from '../../models/tiny-llama/runner.mjs';
import { readLlama } from '../../models/tiny-llama/load-node.mjs';
import { generate as generateGpt } from '../../models/tiny-gpt/runner.mjs';
import { kvCacheBackend } from '../../models/tiny-gpt/attention-backends.mjs';
import { readTinyGPT } from '../../models/tiny-gpt/load-node.mjs';
import { canvasStats, chromiumAndServer } from './suites.mjs';

const harness = chromiumAndServer({ before, after });
const section = '#real-model';

/** Waits until the picked model is loaded and its saved conversation looked up. */
async function pick(page, model) {
  if ((await page.inputValue('#real-model-picker')) !== model) await page.selectOption('#real-model-picker', model);
  await page.waitForFunction(
    (m) => {
      const s = document.getElementById('real-model');
      return s.dataset.model === m && s.dataset.state === 'ready' && s.dataset.savedChecked === m;
    },
    model,
    { timeout: 30_000 },
  );
}

async function generateInPage(page, { count, cache }) {
  await page.fill('#real-count', String(count));
  await page.selectOption('#real-cache', cache);
  await page.selectOption('#real-sampling', 'greedy');
  await page.click('#real-run');
  await page.waitForFunction(
    (n) => {
      const s = document.getElementById('real-model');
      return s.dataset.state === 'done' && s.dataset.generated === String(n);
    },
    count,
    { timeout: 60_000 },
  );
  return page.textContent('#real-text-generated');
}

/**
 * In a page of `model`: N + M greedy bytes at once; then N, Save, reload, Continue M. Returns both texts
 * and what the page said about the restore.
 */
async function saveReloadContinue(page, { model, cache, N, M }) {
  await pick(page, model);
  const whole = await generateInPage(page, { count: N + M, cache });
  const prefill = await page.textContent('#real-prefill'); // the prompt's, for the diagnostic beside the restore's
  const head = await generateInPage(page, { count: N, cache });
  assert.equal(await page.isDisabled('#real-save'), false);
  await page.click('#real-save');
  await page.waitForSelector(`${section}[data-saved="stored"]`);
  assert.match(
    await page.textContent('#real-save-status'),
    /^Saved \d+ bytes of .+ in this browser \(IndexedDB\): 4 KV caches of \d+ tokens/,
  );
  await page.reload();
  await pick(page, model);
  await page.waitForSelector(`${section}[data-saved="available"]`);
  assert.ok(await page.isVisible('#real-continue'));
  assert.match(
    await page.textContent('#real-continue'),
    new RegExp(`^Continue saved conversation \\(\\d+ bytes, ${cache}\\)$`),
  );
  await page.fill('#real-count', String(M));
  await page.click('#real-continue');
  await page.waitForFunction(
    (n) => {
      const s = document.getElementById('real-model');
      return s.dataset.state === 'done' && s.dataset.generated === String(n) && s.dataset.prefillTokens !== undefined;
    },
    N + M,
    { timeout: 60_000 },
  ); // generated: the conversation's bytes after the prompt, saved ones included
  const dataset = await page.$eval(section, (s) => ({ ...s.dataset }));
  return {
    whole,
    head,
    continued: await page.textContent('#real-text-generated'),
    dataset,
    status: await page.textContent('#real-save-status'),
    prefill,
    prefillCell: await page.textContent('#real-prefill'),
  };
}

test('tiny-llama: the picker loads it with its heads view (no labels); N greedy, Save, reload, Continue M == N + M (page and Node), no prefill after the reload; then tiny-gpt the same, with its head rows', async (t) => {
  const context = await harness.browser.newContext({ viewport: { width: 1280, height: 900 } });
  t.after(() => context.close());
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
  await pick(page, 'tiny-gpt');
  const prompt = await page.inputValue('#real-prompt');
  const mha = await createMHA();

  // tiny-llama: no heads.json (no labels, no recomputing them), its own description, its head rows
  const N = 40,
    M = 30;
  const llama = await saveReloadContinue(page, { model: 'tiny-llama', cache: 'float16', N, M });
  assert.ok(await page.isVisible('#real-heads-grid'));
  assert.ok(await page.isVisible('#real-legend'));
  assert.equal(await page.isVisible('#real-verify'), false);
  const llamaRows = await canvasStats(page, '#real-heads canvas.head-row');
  assert.equal(llamaRows.length, 32);
  for (const [i, r] of llamaRows.entries())
    assert.ok(r.nonWhite > r.total / 2 && r.colors >= 3, `tiny-llama head row ${i} is blank after the continue`);
  assert.ok(await page.isVisible('#real-about-tiny-llama'));
  assert.equal(await page.isVisible('#real-about-tiny-gpt'), false);
  assert.match(await page.textContent('#real-status'), /^tiny-llama loaded in \d+ ms/);
  const session = readLlama().createSession(mha, { dtype: 'float16' });
  const expected = decodeBytes(generateLlama(session, encodeBytes(prompt), N + M, { greedy: true }));
  session.free();
  assert.equal(llama.whole, expected);
  assert.equal(llama.head, expected.slice(0, N));
  assert.equal(llama.continued, expected, 'saved, reloaded and continued: the bytes of one generation');
  assert.equal(await page.textContent('#real-text-prompt'), prompt);
  const held = encodeBytes(prompt).length + N - 1; // the last byte was chosen, not yet run
  assert.equal(llama.dataset.restoredTokens, String(held));
  assert.equal(llama.dataset.prefillTokens, '0', 'the Worker ran no token of the restored history again');
  assert.match(
    llama.status,
    new RegExp(
      `^Restored ${held} tokens from IndexedDB in \\d+\\.\\d ms \\(mha\\.loadKVCache per layer\\), no prefill`,
    ),
  );
  assert.match(llama.prefillCell, new RegExp(`^none: ${held} tokens restored from IndexedDB in \\d+\\.\\d ms$`));
  assert.match(
    await page.textContent('#real-cache-info'),
    new RegExp(`^4 layers × ${held + M} of 256 tokens, float16: [\\d,]+ KB$`),
  );
  t.diagnostic(`tiny-llama: ${llama.status} Without a save, the prompt's prefill: ${llama.prefill}`);

  // back to tiny-gpt: its rows are built and drawn again, and its save continues as well (K rows read back)
  const gpt = await saveReloadContinue(page, { model: 'tiny-gpt', cache: 'float32', N: 20, M: 25 });
  const gptSession = readTinyGPT().createSession(kvCacheBackend(mha));
  const gptExpected = decodeBytes(generateGpt(gptSession, encodeBytes(prompt), 45, { greedy: true }));
  gptSession.free();
  assert.equal(gpt.whole, gptExpected);
  assert.equal(gpt.continued, gptExpected);
  assert.equal(gpt.dataset.prefillTokens, '0');
  assert.ok(await page.isVisible('#real-heads-grid'));
  assert.ok(await page.isVisible('#real-verify'));
  const rows = await canvasStats(page, '#real-heads canvas.head-row');
  assert.equal(rows.length, 32);
  for (const [i, r] of rows.entries())
    assert.ok(
      r.nonWhite > r.total / 2 && r.colors >= 3,
      `head row ${i} is blank after the continue: ${JSON.stringify(r)}`,
    );
  t.diagnostic(`tiny-gpt: ${gpt.status} Without a save, the prompt's prefill: ${gpt.prefill}`);

  // the tiny-llama conversation is still there beside tiny-gpt's
  await pick(page, 'tiny-llama');
  assert.equal(await page.$eval(section, (s) => s.dataset.saved), 'available');
  assert.deepEqual(problems, []);
});

test('a saved conversation of an older format is ignored with a message, and no Continue is offered', async (t) => {
  const context = await harness.browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  await page.goto(new URL('web/demo/', harness.server.url).href);
  await pick(page, 'tiny-gpt');
  await page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const open = indexedDB.open('mha-wasm-demo', 1);
        open.onsuccess = () => {
          const tx = open.result.transaction('conversations', 'readwrite');
          tx.objectStore('conversations').put({ model: 'tiny-gpt', tokens: [65, 66], cache: 'not this' });
          tx.oncomplete = () => {
            open.result.close();
            resolve();
          };
          tx.onerror = () => reject(tx.error);
        };
        open.onerror = () => reject(open.error);
      }),
  );
  await page.reload();
  await pick(page, 'tiny-gpt');
  assert.equal(await page.$eval(section, (s) => s.dataset.saved), 'ignored');
  assert.match(
    await page.textContent('#real-save-status'),
    /^A conversation saved for tiny-gpt was ignored: it was saved by an older version of this page\./,
  );
  assert.equal(await page.isVisible('#real-continue'), false);
});
