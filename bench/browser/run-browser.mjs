// `node bench/run.mjs --browser [engine,...]`: the same measurements in a browser: headless Chromium (the
// default, playwright-core, /usr/bin/chromium), headless Firefox ESR (puppeteer-core) or WebKitGTK's
// MiniBrowser on a private Xvfb (selenium-webdriver), or several of them row by row, launched through the browser tests' engine layer
// (scripts/lib/engines.mjs). The repo is served on 127.0.0.1 by that layer's test server (scripts/serve.mjs
// with COOP/COEP: cross-origin isolated, 5 us timers, SharedArrayBuffer where the engine gives it). Each
// (implementation, shape) row gets a fresh page (a fresh browser context on Chromium and Firefox), so a
// renderer crash or OOM costs only that row.
import { shapeByName, describeShape, flopsOf } from '../lib/shapes.mjs';
import { loadAverage } from '../lib/env.mjs';
import { IMPLS, supports } from '../impls/index.mjs';
import { ENGINES, launchEngine, startTestServer } from '../../scripts/lib/engines.mjs';

/** The engines `--browser` accepts: those of the browser tests. */
export const BROWSER_ENGINES = Object.keys(ENGINES);

async function runInPage(engine, base, config, timeoutS) {
  const base0 = { impl: config.impl, shape: config.shape };
  let page;
  let crashed = false;
  try {
    page = await engine.open(`${base}/bench/browser/index.html`);
    if (engine.name === 'chromium')
      page.native.on('crash', () => {
        crashed = true;
      });
    await page.waitFor(() => window.__benchReady === true, undefined, { timeout: 30000 });
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(
        () => resolve({ ...base0, status: 'timeout', error: `no result within ${timeoutS} s` }),
        timeoutS * 1000,
      );
    });
    const result = await Promise.race([page.evaluate((c) => window.__benchRun(c), config), timeout]);
    clearTimeout(timer);
    if (result.status === 'timeout')
      result.phase = await page.evaluate(() => window.__benchPhase).catch(() => undefined);
    return { ...base0, ...result };
  } catch (error) {
    const problems = (await page?.problems().catch(() => [])) ?? [];
    return {
      ...base0,
      status: crashed ? 'crash' : 'error',
      signal: crashed ? 'renderer crash' : undefined,
      error: `${String(error?.message ?? error).split('\n')[0]}${problems.length ? ` | page: ${problems.slice(-5).join(' | ')}` : ''}`,
    };
  } finally {
    await page?.close().catch(() => {});
  }
}

/**
 * Runs the rows in each engine of `opts.engines` (default: chromium) and returns one run per engine.
 * With several engines, every row is measured in each of them back to back (row by row, not engine by
 * engine), so a busy spell of a shared machine falls on all engines alike; the ceiling is measured in
 * each at the start.
 */
export async function runBrowser(opts) {
  const started = Date.now();
  const engineNames = opts.engines ?? ['chromium'];
  const server = await startTestServer();
  const base = server.url.replace(/\/$/, '');
  const sessions = [];
  try {
    for (const engineName of engineNames) {
      // A WebKit page cannot be abandoned while it computes (WebDriver runs one command at a time), so
      // its in-page timeout outlasts the row's.
      const engine = await launchEngine(engineName, { evaluateTimeoutMs: (opts.timeoutS + 60) * 1000 });
      const flags = engineName === 'webkit-flags' ? ', JSC_useSharedArrayBuffer=1 JSC_useWasmRelaxedSIMD=1' : '';
      const env = { ...opts.env, browser: `${engine.version} (${engineName}: ${ENGINES[engineName].driver}${flags})` };
      const options = {
        ...opts,
        engines: undefined,
        engine: engineName,
        env: undefined,
        out: undefined,
        repoRoot: undefined,
      };
      sessions.push({ engine, run: { mode: 'browser', env, options, ceiling: null, results: [] } });
      console.error(
        `mha-wasm bench (browser, ${env.browser}): ${opts.shapes.length} shapes × ${opts.impls.length} implementations, served from ${base}`,
      );
    }
    const label = (engine) => (sessions.length > 1 ? `${engine.name.padEnd(13)}` : '');
    if (opts.ceiling) {
      for (const { engine, run } of sessions) {
        const c = await runInPage(engine, base, { impl: 'ceiling' }, 60);
        run.ceiling = c.status === 'ok' ? c : { gflops: undefined, error: c.error };
        console.error(`${label(engine)}ceiling: ${c.gflops?.toFixed(1) ?? `failed: ${c.error}`} GFLOP/s`);
      }
    }
    for (const name of opts.shapes) {
      const shape = shapeByName(name);
      console.error(`-- ${name} ${describeShape(shape)}: ${(flopsOf(shape) / 1e9).toFixed(3)} GFLOP per call`);
      for (const impl of opts.impls) {
        for (const { engine, run } of sessions) {
          const loadOptions = {};
          // A peer without one of the shape's options (or a row the shape does not list) is skipped, as in Node.
          const ok = supports(impl, shape);
          if (ok !== true) {
            run.results.push({ impl, shape: name, status: 'skipped', error: `${IMPLS[impl].label} ${ok}` });
            continue;
          }
          if (impl === 'ort-std' && !shape.causal) {
            // onnx-proto (CommonJS) builds the graph here; the page gets its bytes.
            const { standardOpsModel } = await import('../lib/onnx-models.mjs');
            loadOptions.model = Array.from(standardOpsModel(shape, false));
          } else if (!['mha-wasm', 'mha-wasm-relaxed', 'mha-wasm-fixed', 'plain-js'].includes(impl)) {
            run.results.push({
              impl,
              shape: name,
              status: 'skipped',
              error:
                'not run in browser mode (the ORT graphs other than the unmasked standard-op one are built in Node with onnx-proto, a CommonJS package; tfjs is Node-only here)',
            });
            continue;
          }
          const r = await runInPage(
            engine,
            base,
            { impl, shape: name, seed: opts.seed, budgetMs: opts.budgetMs, minReps: 3, loadOptions },
            opts.timeoutS,
          );
          run.results.push(r);
          console.error(
            `   ${label(engine)}${impl.padEnd(10)} ${name.padEnd(10)} ` +
              (r.status === 'ok'
                ? `${r.medianMs.toPrecision(4).padStart(9)} ms  ${r.gflops.toFixed(2).padStart(6)} GFLOP/s  first call ${r.firstCallMs.toPrecision(4)} ms${r.extrapolated ? '  (extrapolated)' : ''}`
                : `${r.status}: ${r.error}`),
          );
        }
      }
    }
  } finally {
    for (const { engine } of sessions) await engine.close().catch(() => {});
    await server.close();
  }
  for (const { run } of sessions) {
    run.env.loadAverageEnd = loadAverage();
    run.totalSeconds = (Date.now() - started) / 1000;
  }
  return sessions.map((x) => x.run);
}
