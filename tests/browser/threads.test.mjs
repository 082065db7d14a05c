// The threaded build on every engine of scripts/lib/engines.mjs. With cross-origin isolation (COOP/COEP)
// an engine that gives isolated pages SharedArrayBuffer runs 2 and 3 threads on the simd-threads build
// with the single-threaded build's bits; one that does not (WebKitGTK without JSC_useSharedArrayBuffer=1)
// runs the documented fallback: 1 thread, the same bits, one console warning saying why. Without the
// headers a threads request falls back with one warning naming them. A worker script that fails to load
// makes the request fall back at once; dispose() terminates the workers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestServer } from '../../scripts/lib/engines.mjs';
import { forEachEngine } from './suites.mjs';

let isolated;
let plain;
let brokenWorker;
let lateBrokenWorker;

before(async () => {
  isolated = await startTestServer();
  plain = await startTestServer({ isolation: false });
  // As a bundler or server that breaks the classic worker script would (a SyntaxError in the worker).
  brokenWorker = await startTestServer({
    overrides: { '/dist/mha-threads.worker.js': { type: 'text/javascript', body: 'import x from "/nowhere.js";' } },
  });
  // The same script 500 ms late: its error comes after createMHA listens, on every engine.
  lateBrokenWorker = await startTestServer({
    overrides: {
      '/dist/mha-threads.worker.js': { type: 'text/javascript', body: 'import x from "/nowhere.js";', delayMs: 500 },
    },
  });
});

after(async () => {
  await isolated?.close();
  await plain?.close();
  await brokenWorker?.close();
  await lateBrokenWorker?.close();
});

const BLANK = 'tests/browser/fixtures/blank.html';
const CAUSAL = { batch: 1, seqLen: 384, kvSeqLen: 384, dModel: 256, numHeads: 4, causal: true };
// 3 * 128*512*4 = 768 KiB staged per item: split into 3 groups of 1, which a pool pipelines (instance.ts).
const BATCHED = { batch: 3, seqLen: 128, kvSeqLen: 128, dModel: 512, numHeads: 8, causal: false };
const NO_SHARED_MEMORY =
  /^mha-wasm: (\d+) threads requested, running single-threaded: SharedArrayBuffer is not available in this environment$/;

/** In the page: runs a seeded problem on instances created with each options object, returns infos and bit equality. */
function runInPage(page, optionsList, shape) {
  return page.evaluate(
    async ([optionsList, shape]) => {
      const { createMHA } = await import('/dist/index.js');
      const { mulberry32 } = await import('/scripts/lib/prng.mjs');
      const uniform = mulberry32(12345);
      const random = () => uniform() - 0.5;
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
    },
    [optionsList, shape],
  );
}

forEachEngine((engine) => {
  const { threads } = engine.caps;
  // createMHA's choice on this engine: the relaxed-SIMD builds where it validates relaxed_madd (issue #15).
  const single = engine.caps.relaxedSimd ? 'relaxed-simd' : 'simd';
  const threaded = `${single}-threads`;

  test(
    threads
      ? 'with COOP/COEP: 2 and 3 threads run the threaded build, bit-identical to 1 thread'
      : 'with COOP/COEP but no SharedArrayBuffer: threads fall back to 1, bit-identical, with one warning saying why',
    async () => {
      const page = await engine.open(new URL(BLANK, isolated.url).href);
      const r = await runInPage(page, [{ threads: 2 }, { threads: 3 }, { threads: 'auto' }], CAUSAL);
      assert.equal(r.crossOriginIsolated, true);
      for (const x of r.results) assert.ok(x.bitIdentical, `${JSON.stringify(x.info)} differs (max ${x.maxDiff})`);
      const warnings = await page.warnings();
      if (threads) {
        assert.deepEqual(r.results.map((x) => [x.info.build, x.info.threads]).slice(0, 2), [
          [threaded, 2],
          [threaded, 3],
        ]);
        assert.ok(r.results[2].info.threads >= 1);
        assert.deepEqual(warnings, []);
      } else {
        assert.deepEqual(
          r.results.map((x) => [x.info.build, x.info.threads]),
          [
            [single, 1],
            [single, 1],
            [single, 1],
          ],
        );
        // One warning per reason and page: the first request's.
        assert.equal(warnings.length, 1, JSON.stringify(warnings));
        assert.match(warnings[0], NO_SHARED_MEMORY);
        assert.equal(NO_SHARED_MEMORY.exec(warnings[0])[1], '2');
      }
      assert.deepEqual(await page.problems(), []);
      await page.close();
    },
  );

  test(
    'with COOP/COEP: a batched call in pipelined groups on 2 and 3 threads is bit-identical to 1 thread',
    { skip: !threads && 'no SharedArrayBuffer on this engine: nothing is pipelined' },
    async () => {
      const page = await engine.open(new URL(BLANK, isolated.url).href);
      const r = await runInPage(page, [{ threads: 2 }, { threads: 3 }], BATCHED);
      assert.deepEqual(
        r.results.map((x) => [x.info.build, x.info.threads]),
        [
          [threaded, 2],
          [threaded, 3],
        ],
      );
      for (const x of r.results) assert.ok(x.bitIdentical, `${JSON.stringify(x.info)} differs (max ${x.maxDiff})`);
      assert.deepEqual(await page.problems(), []);
      await page.close();
    },
  );

  test('without COOP/COEP: threads fall back to 1 with one warning naming the missing headers', async () => {
    const page = await engine.open(new URL(BLANK, plain.url).href);
    const r = await runInPage(page, [{ threads: 2 }, { threads: 4 }], CAUSAL);
    assert.equal(r.crossOriginIsolated, false);
    for (const x of r.results) {
      assert.equal(x.info.threads, 1);
      assert.equal(x.info.build, single);
      assert.ok(x.bitIdentical);
    }
    const warnings = await page.warnings();
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.match(
      warnings[0],
      /2 threads requested, running single-threaded: .*Cross-Origin-Opener-Policy: same-origin.*Cross-Origin-Embedder-Policy: require-corp/,
    );
    assert.deepEqual(await page.problems(), []);
    await page.close();
  });

  // WebKit fires a broken worker script's error event a few ms after `new Worker`, before the glue puts
  // its handlers on the worker: createMHA listens from the workers' creation on, so the fallback must
  // still come at once there.
  // server() returns the test server, which before() starts.
  const brokenWorkerTest = (server, late) =>
    test(
      threads
        ? `with COOP/COEP: a worker script that fails to load${late ? ' (served 500 ms late)' : ''} makes threads fall back at once, with a warning`
        : `with COOP/COEP and a broken worker script${late ? ' (served late)' : ''} but no SharedArrayBuffer: the fallback happens before any worker`,
      async () => {
        const page = await engine.open(new URL(BLANK, server().url).href);
        const started = Date.now();
        const { results } = await runInPage(page, [{ threads: 2 }], CAUSAL);
        const elapsed = Date.now() - started;
        assert.deepEqual(results[0].info, {
          version: results[0].info.version,
          simd: true,
          threads: 1,
          build: single,
          maxMemoryBytes: 2 ** 32 - 2 ** 16,
        });
        assert.equal(results[0].bitIdentical, true);
        const fallback = (await page.warnings()).filter((w) => w.includes('running single-threaded'));
        assert.equal(fallback.length, 1, JSON.stringify(fallback));
        const problems = await page.problems();
        if (threads) {
          assert.ok(elapsed < 10000, `fell back after ${elapsed} ms (the start-up timeout is 20 s): ${fallback[0]}`);
          assert.match(
            fallback[0],
            /2 threads requested, running single-threaded: a worker of the threaded build failed to start \(worker sent an error!/,
          );
          // Emscripten 3.1.6's glue would rethrow the worker's error event (an uncaught "Event"); createMHA
          // handles it while the workers start. Only the worker's own SyntaxError may be logged.
          // WebKit reports it as a page error too, located in the worker script.
          const fromWorker = (p) => !p.startsWith('pageerror') || /\(\S*\/mha-threads\.worker\.js\S*\)$/.test(p);
          assert.ok(
            problems.every((p) => fromWorker(p) && /import|nowhere/i.test(p)),
            problems.join('\n'),
          );
        } else {
          assert.match(fallback[0], NO_SHARED_MEMORY);
          assert.deepEqual(problems, []);
        }
        await page.close();
      },
    );
  brokenWorkerTest(() => brokenWorker, false);
  if (threads) brokenWorkerTest(() => lateBrokenWorker, true);

  test(
    threads
      ? 'dispose() terminates every worker of a threaded instance'
      : 'without SharedArrayBuffer a threads request starts no worker, and dispose() works',
    async () => {
      const page = await engine.open(new URL(BLANK, isolated.url).href);
      // Chromium reports worker lifetimes itself (CDP); elsewhere the page counts its workers and their terminate().
      const chromiumWorkers = [];
      if (engine.name === 'chromium') page.native.on('worker', (w) => chromiumWorkers.push(w));
      const r = await page.evaluate(async () => {
        const created = [];
        globalThis.Worker = class CountedWorker extends globalThis.Worker {
          constructor(...args) {
            super(...args);
            created.push(this);
          }
          terminate() {
            this.terminated = true;
            return super.terminate();
          }
        };
        const { createMHA } = await import('/dist/index.js');
        const mha = await createMHA({ threads: 3 });
        const x = new Float32Array(120).map((_, i) => Math.sin(i));
        mha.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
        globalThis.__mha = mha;
        globalThis.__workers = created;
        return { info: { ...mha.info }, workers: created.length };
      });
      const closed = Promise.all(chromiumWorkers.map((w) => new Promise((resolve) => w.once('close', resolve))));
      const terminated = await page.evaluate(() => {
        globalThis.__mha.dispose();
        return globalThis.__workers.filter((w) => w.terminated).length;
      });
      if (threads) {
        assert.equal(r.info.threads, 3);
        assert.ok(r.workers >= 2, `expected at least 2 workers, saw ${r.workers}`);
        assert.equal(terminated, r.workers, `dispose() terminated ${terminated} of ${r.workers} workers`);
        if (engine.name === 'chromium') {
          assert.ok(chromiumWorkers.length >= 2, `expected at least 2 workers, saw ${chromiumWorkers.length}`);
          await Promise.race([
            closed,
            new Promise((_, reject) =>
              setTimeout(() => reject(new Error('workers still alive 5 s after dispose()')), 5000),
            ),
          ]);
        }
      } else {
        assert.equal(r.info.threads, 1);
        assert.equal(r.workers, 0);
      }
      assert.deepEqual(await page.problems(), []);
      await page.close();
    },
  );
});
