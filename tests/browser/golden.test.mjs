// The PyTorch golden sets in the page, on every engine of scripts/lib/engines.mjs, with createMHA's
// choice of build (relaxed-simd where the engine has Relaxed SIMD), plain SIMD128 (`simd: 'fixed'`) and
// the baseline forced by `simd: false`. The page runs scripts/lib/golden-runner.mjs over the files it
// fetches from the test server; the sets are GOLDEN_SETS (v1, v2 with its KV-cache cases, v3, and v4: shared
// prefixes, merged states, reorder, ring caches, and the int4 cache where the build has it). Where the
// engine has threads, the KV-cache cases also run on 1, 2 and 3 threads with the same bits.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startTestServer } from '../../scripts/lib/engines.mjs';
import { forEachEngine } from './suites.mjs';
import { GOLDEN_SETS } from '../../scripts/lib/golden-runner.mjs';
import { repoRoot } from '../js/helpers.mjs';

let server;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.close();
});

/** createMHA's choice on this engine (relaxed-simd where it has Relaxed SIMD), plain SIMD128 and the baseline. */
const buildsOf = (engine) => [
  ...(engine.caps.relaxedSimd
    ? [
        { options: {}, build: 'relaxed-simd', simd: true },
        { options: { simd: 'fixed' }, build: 'simd', simd: true },
      ]
    : [{ options: {}, build: 'simd', simd: true }]),
  { options: { simd: false }, build: 'baseline', simd: false },
];

forEachEngine((engine) => {
  if (engine.caps.threads) {
    test('golden v2 KV-cache cases on 1 thread (simd), 2 and 3 threads (simd-threads): within the tolerances, the same bits', async () => {
      const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
      const r = await page.evaluate(async () => {
        const { createMHA } = await import('/dist/index.js');
        const { fetchReader, runGoldenCase } = await import('/scripts/lib/golden-runner.mjs');
        const read = fetchReader('v2');
        const cases = JSON.parse(new TextDecoder().decode(await read('cases.json'))).filter((c) => c.kind === 'cache');
        const rows = [];
        for (const threads of [1, 2, 3]) {
          const mha = await createMHA({ threads, simd: 'fixed' });
          for (const c of cases) {
            let out;
            const summary = await runGoldenCase(mha, c, read, (output) => {
              out = output;
            });
            rows.push({
              threads,
              build: mha.info.build,
              name: c.name,
              bits: Array.from(new Uint32Array(out.buffer)),
              checks: summary.checks,
            });
          }
          mha.dispose();
        }
        return rows;
      });
      assert.ok(r.length >= 9, `${r.length} runs`);
      for (const row of r) {
        assert.equal(row.build, row.threads > 1 ? 'simd-threads' : 'simd');
        assert.deepEqual(
          row.checks.filter((c) => !c.pass),
          [],
          `${row.name} on ${row.threads} threads`,
        );
        const one = r.find((x) => x.name === row.name && x.threads === 1);
        assert.deepEqual(row.bits, one.bits, `${row.name}: ${row.threads} threads differ in bits from 1 thread`);
      }
      assert.deepEqual(await page.problems(), []);
      await page.close();
    });
  }
  for (const set of GOLDEN_SETS) {
    const cases = JSON.parse(readFileSync(`${repoRoot}/tests/golden/${set}/cases.json`, 'utf8'));
    for (const { options, build, simd } of buildsOf(engine)) {
      test(`golden ${set} (${cases.length} cases) in the page, ${build} build (${JSON.stringify(options)}): within the spec's tolerances`, async (t) => {
        const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
        const r = await page.evaluate(
          async ({ set, options }) => {
            const { createMHA } = await import('/dist/index.js');
            const { fetchReader, runGoldenSet } = await import('/scripts/lib/golden-runner.mjs');
            const read = fetchReader(set);
            const cases = JSON.parse(new TextDecoder().decode(await read('cases.json')));
            const mha = await createMHA(options);
            return { info: { ...mha.info }, results: await runGoldenSet(mha, cases, read) };
          },
          { set, options },
        );
        assert.equal(r.info.build, build);
        assert.equal(r.info.simd, simd);
        assert.deepEqual(
          r.results.map((x) => x.name),
          cases.map((c) => c.name),
        );
        const failed = r.results.flatMap((x) =>
          x.checks.filter((c) => !c.pass).map((c) => `${x.name}: ${c.what} ${JSON.stringify(c)}`),
        );
        assert.deepEqual(failed, []);
        const ratios = r.results.flatMap((x) =>
          x.checks.filter((c) => c.tolerance > 0).map((c) => c.maxError / c.tolerance),
        );
        const float16Array = r.results.some((x) => x.checks.some((c) => c.what.includes('Float16Array')));
        t.diagnostic(
          `${r.results.length} cases (${r.results.filter((x) => x.skipped).length} skipped), ` +
            `${r.results.reduce((n, x) => n + x.checks.length, 0)} checks, worst error / tolerance ` +
            `${Math.max(...ratios).toExponential(2)}${set === 'v3' ? `; Float16Array ${float16Array ? 'checked (the engine has it)' : 'absent'}` : ''}`,
        );
        assert.deepEqual(await page.problems(), []);
        await page.close();
      });
    }
  }
});
