// The builds in Chromium: with cross-origin isolation (COOP/COEP) the threaded build runs with 2 and 3
// threads and gives the single-threaded build's bits; without the headers a threads request falls
// back to 1 thread with one console warning naming the missing headers; simd: false runs the baseline
// build; dispose() terminates the workers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from './chromium.mjs';
import { serve } from '../../scripts/serve.mjs';
import { loadGoldenCases, readGolden, compare } from '../js/helpers.mjs';

let isolated;
let plain;
let browser;

before(async () => {
  isolated = await serve({ port: 0 });
  plain = await serve({ port: 0, isolation: false });
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await isolated?.close();
  await plain?.close();
});

async function openPage(server) {
  const page = await browser.newPage();
  const problems = [];
  const warnings = [];
  page.on('console', (m) => {
    // Chromium logs a 404 for the favicon that the blank page does not have.
    if (m.type() === 'error' && !m.location()?.url?.endsWith('/favicon.ico')) problems.push(`console: ${m.text()} at ${m.location()?.url}`);
    if (m.type() === 'warning') warnings.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(new URL('tests/browser/fixtures/blank.html', server.url).href);
  return { page, problems, warnings };
}

/** In the page: runs a seeded problem on instances created with each options object, returns infos and bit equality. */
async function runInPage(page, optionsList, shape) {
  return page.evaluate(async ([optionsList, shape]) => {
    const { createMHA } = await import('/dist/index.js');
    let seed = 12345;
    const random = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296) - 0.5;
    const { batch: B, seqLen: S, kvSeqLen: T, dModel: D } = shape;
    const q = Float32Array.from({ length: B * S * D }, random);
    const k = Float32Array.from({ length: B * T * D }, random);
    const v = Float32Array.from({ length: B * T * D }, random);
    const reference = await createMHA();
    const expected = reference.multiHeadAttention(q, k, v, shape);
    const results = [];
    for (const options of optionsList) {
      const mha = await createMHA(options);
      const out = mha.multiHeadAttention(q, k, v, shape);
      const again = mha.multiHeadAttention(q, k, v, shape);
      const same = (a) => a.every((x, i) => Object.is(x, expected[i]));
      let maxDiff = 0;
      for (let i = 0; i < out.length; i++) maxDiff = Math.max(maxDiff, Math.abs(out[i] - expected[i]));
      results.push({ info: { ...mha.info }, bitIdentical: same(out) && same(again), maxDiff });
      mha.dispose();
    }
    return { crossOriginIsolated: globalThis.crossOriginIsolated, results };
  }, [optionsList, shape]);
}

const CAUSAL = { batch: 1, seqLen: 384, kvSeqLen: 384, dModel: 256, numHeads: 4, causal: true };

test('Chromium with COOP/COEP: 2 and 3 threads run the threaded build, bit-identical to 1 thread', async () => {
  const { page, problems, warnings } = await openPage(isolated);
  const r = await runInPage(page, [{ threads: 2 }, { threads: 3 }, { threads: 'auto' }], CAUSAL);
  assert.equal(r.crossOriginIsolated, true);
  assert.deepEqual(r.results.map((x) => [x.info.build, x.info.threads]).slice(0, 2), [['relaxed-simd-threads', 2], ['relaxed-simd-threads', 3]]);
  assert.ok(r.results[2].info.threads >= 1);
  for (const x of r.results) assert.ok(x.bitIdentical, `${JSON.stringify(x.info)} differs (max ${x.maxDiff})`);
  assert.deepEqual(warnings, []);
  assert.deepEqual(problems, []);
  await page.close();
});

test('Chromium without COOP/COEP: threads fall back to 1 with one warning naming the missing headers', async () => {
  const { page, problems, warnings } = await openPage(plain);
  const r = await runInPage(page, [{ threads: 2 }, { threads: 4 }], CAUSAL);
  assert.equal(r.crossOriginIsolated, false);
  for (const x of r.results) {
    assert.equal(x.info.threads, 1);
    assert.equal(x.info.build, 'relaxed-simd');
    assert.ok(x.bitIdentical);
  }
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(warnings[0], /2 threads requested, running single-threaded: .*Cross-Origin-Opener-Policy: same-origin.*Cross-Origin-Embedder-Policy: require-corp/);
  assert.deepEqual(problems, []);
  await page.close();
});

test('Chromium with COOP/COEP: a worker script that fails to load makes threads fall back at once, with a warning', async () => {
  const { page, problems, warnings } = await openPage(isolated);
  // As a bundler or server that breaks the classic worker script would (a SyntaxError in the worker).
  await page.route(/mha-threads\.worker\.js/, (route) =>
    route.fulfill({ status: 200, contentType: 'text/javascript', body: 'import x from "/nowhere.js";' }));
  const started = Date.now();
  const { results } = await runInPage(page, [{ threads: 2 }], CAUSAL);
  const elapsed = Date.now() - started;
  assert.deepEqual(results[0].info, { version: results[0].info.version, simd: true, threads: 1, build: 'relaxed-simd' });
  assert.equal(results[0].bitIdentical, true);
  assert.ok(elapsed < 10000, `fell back after ${elapsed} ms (the start-up timeout is 20 s)`);
  const fallback = warnings.filter((w) => w.includes('running single-threaded'));
  assert.equal(fallback.length, 1, JSON.stringify(warnings));
  assert.match(fallback[0], /2 threads requested, running single-threaded: a worker of the threaded build failed to start \(worker sent an error!/);
  // Emscripten 3.1.6's glue would rethrow the worker's error event (an uncaught "Event"); createMHA
  // handles it while the workers start. Only the worker's own SyntaxError may be logged.
  assert.ok(problems.every((p) => !p.startsWith('pageerror') && /Cannot use import statement|nowhere/.test(p)),
    problems.join('\n'));
  await page.close();
});

test('Chromium: simd: false runs the baseline build on the golden example', async () => {
  const c = loadGoldenCases().find((x) => x.name === 'example_b2_s5_d12_h3');
  const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(c, role));
  const { page, problems } = await openPage(plain);
  const r = await page.evaluate(async ([qa, ka, va]) => {
    const { createMHA } = await import('/dist/index.js');
    const mha = await createMHA({ simd: false });
    const out = mha.multiHeadAttention(new Float32Array(qa), new Float32Array(ka), new Float32Array(va),
      { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
    return { info: { ...mha.info }, out: Array.from(out) };
  }, [Array.from(q), Array.from(k), Array.from(v)]);
  assert.equal(r.info.build, 'baseline');
  assert.equal(r.info.simd, false);
  assert.ok(compare(Float32Array.from(r.out), out64).maxError < 1e-5);
  assert.deepEqual(problems, []);
  await page.close();
});

test('Chromium: dispose() terminates the workers of a threaded instance', async () => {
  const { page, problems } = await openPage(isolated);
  const workers = [];
  page.on('worker', (w) => workers.push(w));
  const info = await page.evaluate(async () => {
    const { createMHA } = await import('/dist/index.js');
    const mha = await createMHA({ threads: 3 });
    const x = new Float32Array(120).map((_, i) => Math.sin(i));
    mha.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
    globalThis.__mha = mha;
    return { ...mha.info };
  });
  assert.equal(info.threads, 3);
  assert.ok(workers.length >= 2, `expected at least 2 workers, saw ${workers.length}`);
  const closed = Promise.all(workers.map((w) => new Promise((resolve) => w.once('close', resolve))));
  await page.evaluate(() => globalThis.__mha.dispose());
  await Promise.race([closed, new Promise((_, reject) => setTimeout(() => reject(new Error('workers still alive 5 s after dispose()')), 5000))]);
  assert.deepEqual(problems, []);
  await page.close();
});
