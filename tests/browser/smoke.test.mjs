// Browser smoke test, on every engine of tests/browser/engines.mjs: the engine has what the capability
// table says, a page computes the spec's example, and the README's browser example shows its last row.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { forEachEngine, startTestServer, RELAXED_SIMD_PROBE } from './engines.mjs';
import { loadGoldenCases, readGolden, compare, expectedLastRow } from '../js/helpers.mjs';

let server;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.close();
});

forEachEngine((engine) => {
  test('the engine has the threads and relaxed SIMD its capability table row says', async (t) => {
    const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
    const r = await page.evaluate((probe) => ({
      crossOriginIsolated: globalThis.crossOriginIsolated,
      sharedArrayBuffer: typeof SharedArrayBuffer === 'function',
      relaxedSimd: WebAssembly.validate(new Uint8Array(probe)),
      cores: navigator.hardwareConcurrency,
    }), RELAXED_SIMD_PROBE);
    t.diagnostic(`${engine.version}, ${engine.caps.driver}: ${JSON.stringify(r)}`);
    assert.equal(r.crossOriginIsolated, true);
    assert.equal(r.sharedArrayBuffer, engine.caps.threads, 'SharedArrayBuffer in a cross-origin isolated page');
    assert.equal(r.relaxedSimd, engine.caps.relaxedSimd, 'WebAssembly.validate of the relaxed SIMD probe');
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  test('the spec example computed in the page matches the golden out64', async () => {
    const c = loadGoldenCases().find((x) => x.name === 'example_b2_s5_d12_h3');
    const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(c, role));
    const page = await engine.open(new URL('examples/browser.html', server.url).href);
    const result = await page.evaluate(async ([qa, ka, va]) => {
      const { createMHA } = await import('/dist/index.js');
      const mha = await createMHA();
      const out = mha.multiHeadAttention(new Float32Array(qa), new Float32Array(ka), new Float32Array(va),
        { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
      return { out: Array.from(out), info: mha.info };
    }, [Array.from(q), Array.from(k), Array.from(v)]);
    assert.equal(result.info.simd, true);
    assert.equal(result.info.build, 'simd');
    const r = compare(Float32Array.from(result.out), out64);
    assert.ok(r.maxError <= 1e-5, `max |${engine.name} - out64| = ${r.maxError}`);
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  test('examples/browser.html (README browser quick start) shows the right last row', async () => {
    const page = await engine.open(new URL('examples/browser.html', server.url).href);
    await page.waitFor(() => !document.querySelector('#result').textContent.includes('computing'));
    assert.equal(await page.evaluate(() => document.querySelector('#result').textContent), `last row: ${expectedLastRow()}`);
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });
});
