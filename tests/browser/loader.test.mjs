// The loader's errors on every engine of tests/browser/engines.mjs: a 404, an HTML page where the .wasm
// should be, a foreign module and a version mismatch each give an Error that names what was fetched and
// what was expected; afterwards the defaults still load. The cases are the consumers' shared fixture
// (tests/consumers/fixtures/shared/errors.js), served here as the repository's own dist/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { forEachEngine, startTestServer } from './engines.mjs';
import { repoRoot } from '../js/helpers.mjs';

const { version } = JSON.parse(readFileSync(`${repoRoot}/package.json`, 'utf8'));
let server;

before(async () => {
  server = await startTestServer({
    // errors.js expects the layout of an installed package and an HTML page at /plain.html (an SPA fallback).
    mounts: { '/node_modules/mha-wasm/': '.' },
    overrides: { '/plain.html': { type: 'text/html; charset=utf-8', body: '<!doctype html><title>SPA fallback</title>' } },
  });
});

after(async () => {
  await server?.close();
});

forEachEngine((engine) => {
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
    assert.match(r.emptyModule, /^Error: mha-wasm: wasmBinary \(8 bytes\) does not match this script .*without a memory export/);
    assert.match(r.versionMismatch,
      new RegExp(`^Error: mha-wasm: version mismatch: the script is ${version} but wasmBinary \\(\\d+ bytes\\) is 9\\.9\\.9`));
    assert.equal(r.bothSources, 'TypeError: createMHA: expected at most one of wasmUrl and wasmBinary, got both');
    for (const key of ['defaultAfter', 'goodUrl', 'goodBinary']) assert.equal(r[key], `no error (version ${version})`, key);
    assert.deepEqual(await page.problems(), [`HTTP 404: ${base}missing.wasm`]);
    await page.close();
  });
});
