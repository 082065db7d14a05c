// The Relaxed SIMD builds in Chromium (which has Relaxed SIMD since 114): createMHA() selects relaxed-simd,
// and relaxed-simd-threads for threads on a cross-origin isolated page; both run the golden v1 set (out and
// weights) within the golden tolerance and the spec example; simd: 'fixed' gives the SIMD128 build.
// Written against Chromium alone (chromiumAndServer, tests/browser/suites.mjs): the engine layer
// (scripts/lib/engines.mjs) would run it on Firefox and WebKit-with-flags too, from its capability
// table's relaxedSimd; that is not done yet.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { chromiumAndServer } from './suites.mjs';
import { checkOut, checkWeights, expectedLastRow, goldenDir, loadGoldenCases, readGolden } from '../js/helpers.mjs';

const harness = chromiumAndServer({ before, after });

async function openPage() {
  const page = await harness.browser.newPage();
  const problems = [];
  page.on('console', (m) => {
    // The first page of a browser asks for /favicon.ico, which the test server does not have.
    if ((m.type() === 'error' || m.type() === 'warning') && !m.location()?.url?.endsWith('/favicon.ico')) {
      problems.push(`console.${m.type()}: ${m.text()} (${m.location()?.url})`);
    }
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(new URL('tests/browser/fixtures/blank.html', harness.server.url).href);
  return { page, problems };
}

const cases = loadGoldenCases();
/** The golden inputs as plain arrays, for page.evaluate. */
const inputs = cases.map((c) => ({
  name: c.name,
  shape: { batch: c.batch, seqLen: c.seqLen, kvSeqLen: c.kvSeqLen, dModel: c.dModel, numHeads: c.numHeads },
  q: Array.from(readGolden(c, 'q')),
  k: Array.from(readGolden(c, 'k')),
  v: Array.from(readGolden(c, 'v')),
  mask: c.hasMask ? Array.from(readGolden(c, 'mask')) : null,
}));

/** Runs the golden cases in the page on createMHA(options); returns info, the probe's answer, outputs. */
function runGoldenInPage(page, options, list = inputs) {
  return page.evaluate(
    async ([list, opts]) => {
      const { createMHA } = await import('/dist/index.js');
      const probe = new Uint8Array([
        0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 1, 123, 0, 3, 2, 1, 0, 10, 14, 1, 12, 0, 32, 0, 32, 0, 32, 0, 253,
        133, 2, 26, 11,
      ]);
      const mha = await createMHA(opts);
      const results = list.map((c) => {
        const o = { ...c.shape, mask: c.mask ? new Uint8Array(c.mask) : undefined };
        const q = new Float32Array(c.q),
          k = new Float32Array(c.k),
          v = new Float32Array(c.v);
        return {
          name: c.name,
          out: Array.from(mha.multiHeadAttention(q, k, v, o)),
          weights: Array.from(mha.attentionWeights(q, k, o)),
        };
      });
      const info = { ...mha.info };
      mha.dispose();
      return {
        info,
        relaxedSimd: WebAssembly.validate(probe),
        crossOriginIsolated: globalThis.crossOriginIsolated,
        results,
      };
    },
    [list, options],
  );
}

function assertGolden(r, label) {
  let worst = 0;
  for (const result of r.results) {
    const c = cases.find((x) => x.name === result.name);
    const out = checkOut(Float32Array.from(result.out), readGolden(c, 'out64'), readGolden(c, 'out32'));
    assert.ok(out.ok, `${label} ${c.name}: ${out.problem}`);
    const weights = checkWeights(Float32Array.from(result.weights), readGolden(c, 'weights64'));
    assert.ok(weights.ok, `${label} ${c.name}: weights: ${weights.problem}`);
    worst = Math.max(worst, out.ratio);
  }
  assert.equal(r.results.length, cases.length);
  console.log(
    `# ${label}: worst |out - out64| / tolerance over ${r.results.length} cases of ${path.basename(goldenDir)}: ${worst.toExponential(3)}`,
  );
}

test('Chromium: createMHA() selects relaxed-simd, which passes the golden set (out, weights)', async () => {
  const { page, problems } = await openPage();
  const r = await runGoldenInPage(page, {});
  assert.equal(r.relaxedSimd, true, 'Chromium validates the Relaxed SIMD probe');
  assert.deepEqual(r.info, {
    version: r.info.version,
    simd: true,
    threads: 1,
    build: 'relaxed-simd',
    maxMemoryBytes: 2 ** 32 - 2 ** 16,
  });
  assertGolden(r, 'relaxed-simd');
  assert.deepEqual(problems, []);
  await page.close();
});

test('Chromium with COOP/COEP: threads: 2 selects relaxed-simd-threads, which passes the golden set', async () => {
  const { page, problems } = await openPage();
  const r = await runGoldenInPage(page, { threads: 2 });
  assert.equal(r.crossOriginIsolated, true);
  assert.deepEqual(r.info, {
    version: r.info.version,
    simd: true,
    threads: 2,
    build: 'relaxed-simd-threads',
    maxMemoryBytes: 2 ** 32 - 2 ** 16,
  });
  assertGolden(r, 'relaxed-simd-threads');
  assert.deepEqual(problems, []);
  await page.close();
});

test("Chromium: simd: 'fixed' selects the SIMD128 builds, which pass the golden set too", async () => {
  const { page, problems } = await openPage();
  const single = await runGoldenInPage(page, { simd: 'fixed' });
  assert.equal(single.info.build, 'simd');
  assertGolden(single, 'simd (fixed)');
  const threaded = await runGoldenInPage(page, { simd: 'fixed', threads: 2 }, []);
  assert.deepEqual([threaded.info.build, threaded.info.threads], ['simd-threads', 2]);
  assert.deepEqual(problems, []);
  await page.close();
});

test('Chromium smoke: the spec example and examples/browser.html on the relaxed build; the relaxed files as wasmUrl', async () => {
  const page = await harness.browser.newPage();
  const problems = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(new URL('examples/browser.html', harness.server.url).href);
  await page.waitForFunction(() => !document.querySelector('#result').textContent.includes('computing'));
  const c = cases.find((x) => x.name === 'example_b2_s5_d12_h3');
  const r = await page.evaluate(
    async ([qa, ka, va]) => {
      const { createMHA } = await import('/dist/index.js');
      const run = async (options) => {
        const mha = await createMHA(options);
        const out = mha.multiHeadAttention(new Float32Array(qa), new Float32Array(ka), new Float32Array(va), {
          batch: 2,
          seqLen: 5,
          dModel: 12,
          numHeads: 3,
        });
        const info = { ...mha.info };
        mha.dispose();
        return { info, out: Array.from(out) };
      };
      return [
        await run({}),
        await run({ wasmUrl: '/dist/mha-relaxed.wasm' }),
        await run({ wasmUrl: '/dist/mha-relaxed-threads.wasm', threads: 2 }),
      ];
    },
    ['q', 'k', 'v'].map((role) => Array.from(readGolden(c, role))),
  );
  assert.deepEqual(
    r.map((x) => [x.info.build, x.info.threads]),
    [
      ['relaxed-simd', 1],
      ['relaxed-simd', 1],
      ['relaxed-simd-threads', 2],
    ],
  );
  for (const x of r)
    assert.ok(checkOut(Float32Array.from(x.out), readGolden(c, 'out64'), readGolden(c, 'out32')).ok, x.info.build);
  assert.equal(await page.textContent('#result'), `last row: ${expectedLastRow()}`);
  assert.deepEqual(problems, []);
  await page.close();
});
