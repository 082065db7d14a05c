// Browser smoke test: Chromium loads pages that import the package, runs the spec's example and the
// README's browser example; results are checked against the PyTorch golden output.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from './chromium.mjs';
import { serve } from '../../scripts/serve.mjs';
import { loadGoldenCases, readGolden, compare, expectedLastRow } from '../js/helpers.mjs';

let server;
let browser;

before(async () => {
  server = await serve({ port: 0 });
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

async function openPage(url) {
  const page = await browser.newPage();
  const problems = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(url);
  return { page, problems };
}

test('the spec example computed in Chromium matches the golden out64', async () => {
  const c = loadGoldenCases().find((x) => x.name === 'example_b2_s5_d12_h3');
  const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(c, role));
  const { page, problems } = await openPage(new URL('examples/browser.html', server.url).href);
  const result = await page.evaluate(async ([qa, ka, va]) => {
    const { createMHA } = await import('/dist/index.js');
    const mha = await createMHA();
    const out = mha.multiHeadAttention(new Float32Array(qa), new Float32Array(ka), new Float32Array(va),
      { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
    return { out: Array.from(out), info: mha.info };
  }, [Array.from(q), Array.from(k), Array.from(v)]);
  assert.equal(result.info.simd, true);
  const r = compare(Float32Array.from(result.out), out64);
  assert.ok(r.maxError <= 1e-5, `max |chromium - out64| = ${r.maxError}`);
  assert.deepEqual(problems, []);
  await page.close();
});

test('examples/browser.html (README browser quick start) shows the right last row', async () => {
  const { page, problems } = await openPage(new URL('examples/browser.html', server.url).href);
  await page.waitForFunction(() => !document.querySelector('#result').textContent.includes('computing'));
  assert.equal(await page.textContent('#result'), `last row: ${expectedLastRow()}`);
  assert.deepEqual(problems, []);
  await page.close();
});
