// `node bench/run.mjs --browser`: the same measurements in headless Chromium (playwright-core,
// /usr/bin/chromium). The repo is served by a tiny static server on 127.0.0.1 with COOP/COEP headers
// (cross-origin isolated: 5 us timers, SharedArrayBuffer). Each (implementation, shape) row gets a
// fresh browser context and page, so a renderer crash or OOM costs only that row.
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { extname, join, normalize, sep } from 'node:path';
import { chromium } from 'playwright-core';
import { shapeByName, describeShape, flopsOf } from '../lib/shapes.mjs';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};

export function startServer(root) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = normalize(join(root, path));
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Cache-Control': 'no-store',
    };
    if (file !== root && !file.startsWith(root + sep)) {
      res.writeHead(403, headers).end('forbidden');
      return;
    }
    let st;
    try {
      st = statSync(file);
    } catch {
      res.writeHead(404, headers).end('not found');
      return;
    }
    if (!st.isFile()) {
      res.writeHead(404, headers).end('not found');
      return;
    }
    res.writeHead(200, { ...headers, 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream', 'Content-Length': st.size });
    createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

async function runInPage(browser, base, config, timeoutS) {
  const context = await browser.newContext();
  const page = await context.newPage();
  let crashed = false;
  page.on('crash', () => {
    crashed = true;
  });
  const consoleTail = [];
  page.on('console', (m) => {
    consoleTail.push(m.text());
    if (consoleTail.length > 5) consoleTail.shift();
  });
  page.on('pageerror', (e) => consoleTail.push(String(e)));
  const base0 = { impl: config.impl, shape: config.shape };
  try {
    await page.goto(`${base}/bench/browser/index.html`);
    await page.waitForFunction(() => window.__benchReady === true, null, { timeout: 30000 });
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve({ ...base0, status: 'timeout', error: `no result within ${timeoutS} s` }), timeoutS * 1000);
    });
    const result = await Promise.race([page.evaluate((c) => window.__benchRun(c), config), timeout]);
    clearTimeout(timer);
    if (result.status === 'timeout') result.phase = await page.evaluate(() => window.__benchPhase).catch(() => undefined);
    return { ...base0, ...result };
  } catch (error) {
    return {
      ...base0,
      status: crashed ? 'crash' : 'error',
      signal: crashed ? 'renderer crash' : undefined,
      error: `${String(error?.message ?? error).split('\n')[0]}${consoleTail.length ? ` | console: ${consoleTail.join(' | ')}` : ''}`,
    };
  } finally {
    await context.close().catch(() => {});
  }
}

export async function runBrowser(opts) {
  const started = Date.now();
  const server = await startServer(opts.repoRoot);
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  const env = { ...opts.env, browser: `Chromium ${browser.version()} (headless, playwright-core)` };
  const run = { mode: 'browser', env, options: { ...opts, env: undefined, out: undefined, repoRoot: undefined }, ceiling: null, results: [] };
  try {
    console.error(`mha-wasm bench (browser, ${env.browser}): ${opts.shapes.length} shapes × ${opts.impls.length} implementations, served from ${base}`);
    if (opts.ceiling) {
      const c = await runInPage(browser, base, { impl: 'ceiling' }, 60);
      run.ceiling = c.status === 'ok' ? c : { gflops: undefined, error: c.error };
      console.error(`ceiling: ${c.gflops?.toFixed(1) ?? `failed: ${c.error}`} GFLOP/s`);
    }
    for (const name of opts.shapes) {
      const shape = shapeByName(name);
      console.error(`-- ${name} ${describeShape(shape)}: ${(flopsOf(shape) / 1e9).toFixed(3)} GFLOP per call`);
      for (const impl of opts.impls) {
        const loadOptions = {};
        if (impl === 'ort-std' && !shape.causal) {
          // onnx-proto (CommonJS) builds the graph here; the page gets its bytes.
          const { standardOpsModel } = await import('../lib/onnx-models.mjs');
          loadOptions.model = Array.from(standardOpsModel(shape, false));
        } else if (!['mha-wasm', 'mha-wasm-relaxed', 'mha-wasm-fixed', 'plain-js'].includes(impl)) {
          run.results.push({ impl, shape: name, status: 'skipped', error: 'not run in browser mode (the ORT graphs other than the unmasked standard-op one are built in Node with onnx-proto, a CommonJS package; tfjs is Node-only here)' });
          continue;
        }
        const r = await runInPage(browser, base, { impl, shape: name, seed: opts.seed, budgetMs: opts.budgetMs, minReps: 3, loadOptions }, opts.timeoutS);
        run.results.push(r);
        console.error(
          `   ${impl.padEnd(10)} ${name.padEnd(10)} ` +
            (r.status === 'ok'
              ? `${r.medianMs.toPrecision(4).padStart(9)} ms  ${r.gflops.toFixed(2).padStart(6)} GFLOP/s  first call ${r.firstCallMs.toPrecision(4)} ms${r.extrapolated ? '  (extrapolated)' : ''}`
              : `${r.status}: ${r.error}`),
        );
      }
    }
  } finally {
    await browser.close().catch(() => {});
    server.close();
  }
  run.totalSeconds = (Date.now() - started) / 1000;
  return run;
}
