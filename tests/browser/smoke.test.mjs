// Browser smoke test, on every engine of scripts/lib/engines.mjs: the engine has what the capability
// table says, a page computes the spec's example, the README's browser example shows its last row, and
// the loader's errors (a 404, an HTML page where the .wasm should be, a foreign module, a version mismatch)
// each name what was fetched and what was expected, after which the defaults still load. The loader cases
// are the consumers' shared fixture (tests/consumers/fixtures/shared/errors.js), served here with the
// repository's own dist/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startTestServer, RELAXED_SIMD_PROBE } from '../../scripts/lib/engines.mjs';
import { forEachEngine } from './suites.mjs';
import {
  loadGoldenCases,
  readGolden,
  compare,
  expectedLastRow,
  mulberry32,
  randomNormal,
  repoRoot,
} from '../js/helpers.mjs';

const { version } = JSON.parse(readFileSync(`${repoRoot}/package.json`, 'utf8'));
let server;

before(async () => {
  server = await startTestServer({
    // errors.js expects the layout of an installed package and an HTML page at /plain.html (an SPA fallback).
    mounts: { '/node_modules/mha-wasm/': '.' },
    overrides: {
      '/plain.html': { type: 'text/html; charset=utf-8', body: '<!doctype html><title>SPA fallback</title>' },
    },
  });
});

after(async () => {
  await server?.close();
});

forEachEngine((engine) => {
  test('the engine has the threads and relaxed SIMD its capability table row says', async (t) => {
    const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
    const r = await page.evaluate(
      (probe) => ({
        crossOriginIsolated: globalThis.crossOriginIsolated,
        sharedArrayBuffer: typeof SharedArrayBuffer === 'function',
        relaxedSimd: WebAssembly.validate(new Uint8Array(probe)),
        cores: navigator.hardwareConcurrency,
      }),
      RELAXED_SIMD_PROBE,
    );
    t.diagnostic(`${engine.version}, ${engine.caps.driver}: ${JSON.stringify(r)}`);
    assert.equal(r.crossOriginIsolated, true);
    assert.equal(r.sharedArrayBuffer, engine.caps.threads, 'SharedArrayBuffer in a cross-origin isolated page');
    assert.equal(r.relaxedSimd, engine.caps.relaxedSimd, 'WebAssembly.validate of the relaxed SIMD probe');
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  // Issue #15 (relaxed SIMD): createMHA() picks the relaxed build where engine.caps.relaxedSimd is true
  // (Chromium, Firefox, webkit-flags) and plain SIMD where it is false (webkit).

  test('the spec example computed in the page matches the golden out64', async () => {
    const c = loadGoldenCases().find((x) => x.name === 'example_b2_s5_d12_h3');
    const [q, k, v, out64] = ['q', 'k', 'v', 'out64'].map((role) => readGolden(c, role));
    const page = await engine.open(new URL('examples/browser.html', server.url).href);
    const result = await page.evaluate(
      async ([qa, ka, va]) => {
        const { createMHA } = await import('/dist/index.js');
        const mha = await createMHA();
        const out = mha.multiHeadAttention(new Float32Array(qa), new Float32Array(ka), new Float32Array(va), {
          batch: 2,
          seqLen: 5,
          dModel: 12,
          numHeads: 3,
        });
        return { out: Array.from(out), info: mha.info };
      },
      [Array.from(q), Array.from(k), Array.from(v)],
    );
    assert.equal(result.info.simd, true);
    assert.equal(result.info.build, engine.caps.relaxedSimd ? 'relaxed-simd' : 'simd');
    const r = compare(Float32Array.from(result.out), out64);
    assert.ok(r.maxError <= 1e-5, `max |${engine.name} - out64| = ${r.maxError}`);
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  test('examples/browser.html (README browser quick start) shows the right last row', async () => {
    const page = await engine.open(new URL('examples/browser.html', server.url).href);
    await page.waitFor(() => !document.querySelector('#result').textContent.includes('computing'));
    assert.equal(
      await page.evaluate(() => document.querySelector('#result').textContent),
      `last row: ${expectedLastRow()}`,
    );
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  test('KVCache.save and loadKVCache: the page saves the bytes Node saves, loads them back, refuses a changed byte', async () => {
    // The same float16 cache (ragged, Dv != Dh) in Node and in the page: its save has the same bytes on every
    // engine and build (docs/cache-format.md).
    const cache = { batch: 2, numKvHeads: 2, headDim: 8, capacity: 24, dtype: 'float16', vHeadDim: 5 };
    const random = mulberry32(31);
    const [q, k, v] = [2 * 6 * 4 * 8, 2 * 6 * 2 * 8, 2 * 6 * 2 * 5].map((n) => Array.from(randomNormal(n, random)));
    const run = async (createMHA, [qa, ka, va], options) => {
      const mha = await createMHA();
      const c = mha.createKVCache(options);
      c.attend(new Float32Array(qa), new Float32Array(ka), new Float32Array(va), { numHeads: 4, newTokens: [6, 3] });
      const bytes = c.save();
      const copy = mha.loadKVCache(bytes.subarray(0), { capacity: 30 });
      const resaved = mha.loadKVCache(copy.save(), { capacity: 24 }).save();
      const changed = bytes.slice();
      changed[70] ^= 1;
      let refused = '';
      try {
        mha.loadKVCache(changed);
      } catch (error) {
        refused = `${error.constructor.name}: ${error.message}`;
      }
      const out = {
        bytes: Array.from(bytes),
        same: resaved.every((x, i) => x === bytes[i]) && resaved.length === bytes.length,
        lengths: Array.from(copy.lengths),
        refused,
        build: mha.info.build,
      };
      mha.dispose();
      return out;
    };
    const { createMHA } = await import('../../dist/index.js');
    const expected = await run(createMHA, [q, k, v], cache);
    const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
    const r = await page.evaluate(
      async ([source, inputs, options]) => {
        const { createMHA } = await import('/dist/index.js');
        return (0, eval)(`(${source})`)(createMHA, inputs, options);
      },
      [run.toString(), [q, k, v], cache],
    );
    assert.deepEqual(r.lengths, [6, 3]);
    assert.ok(r.same, `${r.build}: the load of the save saves other bytes`);
    assert.deepEqual(r.bytes, expected.bytes, `${r.build} saves other bytes than Node's ${expected.build}`);
    assert.match(r.refused, /^RangeError: loadKVCache: bytes: checksum mismatch/);
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  test('loader errors: 404, HTML page, foreign module, version mismatch name what was fetched and expected', async () => {
    const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
    const r = await page.evaluate(async () => {
      const { createMHA } = await import('/dist/index.js');
      const { loaderErrors } = await import('/tests/consumers/fixtures/shared/errors.js');
      const wasm = await (await fetch('/dist/mha.wasm')).arrayBuffer();
      return loaderErrors(createMHA, location.origin, wasm);
    });
    const base = server.url;
    assert.match(r.notFound, new RegExp(`^Error: mha-wasm: fetching ${base}missing\\.wasm failed: HTTP 404`));
    assert.ok(r.notFound.includes(`expected the WebAssembly file mha.wasm of mha-wasm ${version}`), r.notFound);
    assert.match(r.html, new RegExp(`^Error: mha-wasm: ${base}plain\\.html is not a WebAssembly file`));
    assert.ok(r.html.includes('magic bytes 00 61 73 6d'), r.html);
    assert.match(r.html, /starting 3c 21 64 6f, an HTML page.*served as text\/html/);
    assert.match(
      r.emptyModule,
      /^Error: mha-wasm: wasmBinary \(8 bytes\) does not match this script .*without a memory export/,
    );
    assert.match(
      r.versionMismatch,
      new RegExp(
        `^Error: mha-wasm: version mismatch: the script is ${version} but wasmBinary \\(\\d+ bytes\\) is 9\\.9\\.9`,
      ),
    );
    assert.equal(r.bothSources, 'TypeError: createMHA: expected at most one of wasmUrl and wasmBinary, got both');
    for (const key of ['defaultAfter', 'goodUrl', 'goodBinary'])
      assert.equal(r[key], `no error (version ${version})`, key);
    assert.deepEqual(await page.problems(), [`HTTP 404: ${base}missing.wasm`]);
    await page.close();
  });
});
