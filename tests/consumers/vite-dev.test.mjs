// Vite at run time, as users run it every day: the dev server (`vite`, here its createServer API) and
// `vite build` + `vite preview`, on a copy of examples/vite with the `npm pack` tarball installed in it
// (offline), driven in Chromium. Vite is the repository's pinned devDependency (its node_modules).
//
//   - dev server, documented config (optimizeDeps.exclude) + COOP/COEP headers: the example page, the
//     spec's golden example, and threads: 2 (simd-threads, 2 threads, bit-identical to 1 thread);
//   - the same dev server without COOP/COEP: threads: 2 falls back to 1 thread with one warning;
//   - the dev server without optimizeDeps.exclude (the package pre-bundled into the deps cache);
//   - vite build + vite preview with COOP/COEP and threads: 2 (the threaded glue and its worker must
//     be emitted by the bundler and load at run time).
//
// Needs a built dist/ (npm run build). Env: MHA_GOLDEN_DIR as the other suites, MHA_KEEP_CONSUMERS=1
// keeps the temporary app and prints its path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createServer, build, preview, createLogger } from 'vite';
import { launchChromium } from '../../scripts/lib/chromium.mjs';
import { expectedLastRow } from '../js/helpers.mjs';
import {
  repoRoot,
  installPackedTarball,
  specGolden,
  openResources,
  computeInPage,
  assertGoldenOutput,
} from './harness.mjs';

const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8'));

const ISOLATION_HEADERS = Object.freeze({
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
});
/** The spec's example, and a problem big enough for the threaded kernel to split it (>= 4e6 flops). */

let app; // the temporary Vite app, with mha-wasm installed from the tarball
let documented; // examples/vite/vite.config.js, the configuration the package documents
let golden; // { q, k, v, out64 } of the spec's example
let browser;
const resources = openResources(); // servers and pages still open, closed in after() if a test failed midway
const track = resources.track;

before(async () => {
  assert.ok(fs.existsSync(path.join(repoRoot, 'dist/mha.wasm')), 'dist/ is not built: run npm run build');
  app = fs.mkdtempSync(path.join(os.tmpdir(), 'mha-wasm-vite-dev-'));
  fs.cpSync(path.join(repoRoot, 'examples/vite'), app, {
    recursive: true,
    filter: (src) => !/[\\/](node_modules|dist)$/.test(src),
  });
  // The app installs the tarball itself (as a user's app has its own node_modules); Vite comes from the repo.
  const manifest = JSON.parse(fs.readFileSync(path.join(app, 'package.json'), 'utf8'));
  delete manifest.dependencies;
  delete manifest.devDependencies;
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify(manifest, null, 2));
  await installPackedTarball(app);
  // A second page that hands createMHA to the test. The icon link keeps Chromium from asking for /favicon.ico.
  fs.writeFileSync(
    path.join(app, 'test.html'),
    `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>mha-wasm test page</title></head>
<body><script type="module" src="/src/test-entry.js"></script></body></html>
`,
  );
  fs.writeFileSync(
    path.join(app, 'src/test-entry.js'),
    `import { createMHA, version } from 'mha-wasm';
window.mhaWasm = { createMHA, version };
document.body.dataset.ready = '1';
`,
  );
  const indexHtml = path.join(app, 'index.html');
  fs.writeFileSync(
    indexHtml,
    fs
      .readFileSync(indexHtml, 'utf8')
      .replace('<meta charset="utf-8" />', '<meta charset="utf-8" />\n    <link rel="icon" href="data:," />'),
  );
  documented = (await import(pathToFileURL(path.join(app, 'vite.config.js')).href)).default;
  assert.deepEqual(
    documented.optimizeDeps?.exclude,
    ['mha-wasm'],
    'examples/vite/vite.config.js changed: review this test',
  );
  golden = specGolden();
  browser = await launchChromium();
});

after(async () => {
  await resources.closeAll();
  await browser?.close();
  if (process.env.MHA_KEEP_CONSUMERS) console.log(`vite app kept at ${app}`);
  else if (app) fs.rmSync(app, { recursive: true, force: true });
});

/** Collects what Vite itself logs as a warning or an error (the dev server's own view of the requests). */
function recordingLogger(sink) {
  const logger = createLogger('warn', { allowClearScreen: false });
  const { warn, error } = logger;
  logger.warn = (msg, options) => {
    sink.push(`vite warn: ${msg}`);
    warn(msg, options);
  };
  logger.error = (msg, options) => {
    sink.push(`vite error: ${msg}`);
    error(msg, options);
  };
  return logger;
}

/**
 * Starts Vite's dev server on 127.0.0.1 and a free port. `isolation`: send COOP/COEP; `exclude`: keep the
 * documented optimizeDeps.exclude (false: the package is pre-bundled into the deps cache).
 */
async function startDevServer(name, { isolation, exclude }) {
  const serverLog = [];
  const server = await createServer({
    ...documented,
    configFile: false,
    root: app,
    cacheDir: `node_modules/.vite-${name}`,
    logLevel: 'warn',
    customLogger: recordingLogger(serverLog),
    optimizeDeps: exclude ? documented.optimizeDeps : { ...documented.optimizeDeps, exclude: [] },
    server: { host: '127.0.0.1', port: 0, strictPort: true, headers: isolation ? { ...ISOLATION_HEADERS } : {} },
  });
  const close = track(() => server.close());
  await server.listen();
  return { url: server.resolvedUrls.local[0], serverLog, close };
}

/**
 * Opens `pagePath` and records what the test asserts on: console errors, page errors, HTTP errors
 * (with their URL), console warnings, the workers started and the URLs requested.
 */
async function openPage(baseUrl, pagePath) {
  const page = await browser.newPage();
  const close = track(() => page.close());
  const seen = { problems: [], warnings: [], workers: [], requests: [] };
  let failFast;
  const pageFailed = new Promise((_, reject) => {
    failFast = reject;
  });
  pageFailed.catch(() => {});
  page.on('console', (m) => {
    if (m.type() === 'error') seen.problems.push(`console error: ${m.text()}`);
    if (m.type() === 'warning') seen.warnings.push(m.text());
  });
  page.on('pageerror', (e) => {
    seen.problems.push(`pageerror: ${e.message}`);
    // A pthread worker that fails to load shows up here (Chromium reports its error event as "ErrorEvent";
    // Emscripten's glue console.warns the reason). Fail now rather than after createMHA's 20 s start-up
    // timeout, with what the page said in the meantime.
    setTimeout(
      () =>
        failFast(
          new Error(
            `the page reported an uncaught error: ${e.message}\n` +
              `problems: ${JSON.stringify(seen.problems)}\nwarnings: ${JSON.stringify(seen.warnings)}`,
          ),
        ),
      250,
    );
  });
  page.on('response', (r) => r.status() >= 400 && seen.problems.push(`HTTP ${r.status()}: ${r.url()}`));
  page.on('request', (r) => seen.requests.push(r.url()));
  page.on('worker', (w) => seen.workers.push(w.url()));
  await page.goto(new URL(pagePath, baseUrl).href);
  /** Waits for `promise`; fails as soon as the page reports an uncaught error, or after 30 s (nothing may hang). */
  const guard = (promise) => {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `no answer from the page within 30 s; problems: ${JSON.stringify(seen.problems)}, ` +
                `warnings: ${JSON.stringify(seen.warnings)}`,
            ),
          ),
        30_000,
      );
    });
    return Promise.race([promise, pageFailed, timeout]).finally(() => clearTimeout(timer));
  };
  const evaluate = (fn, arg) => guard(page.evaluate(fn, arg));
  return { page, seen, guard, evaluate, close };
}

async function openTestPage(baseUrl) {
  const p = await openPage(baseUrl, '/test.html');
  await p.guard(p.page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 30_000 }));
  return p;
}

/**
 * In the page: one instance per options object (in order, each disposed after use) computes the golden
 * example and the seeded causal problem. Returns each instance's info, its golden output, and whether its
 * causal output has the same bits as the first instance's; plus crossOriginIsolated.
 */
/** The threaded run of computeInPage([{}, { threads: 2 }]): the threaded build, 2 threads, 1-thread bits. */
function assertThreaded(r, seen) {
  assert.equal(r.crossOriginIsolated, true, 'the page is not cross-origin isolated: COOP/COEP headers missing?');
  const [one, two] = r.results;
  assert.deepEqual(one.info, {
    version: pkg.version,
    simd: true,
    threads: 1,
    build: 'relaxed-simd',
    maxMemoryBytes: 2 ** 32 - 2 ** 16,
  });
  assert.deepEqual(two.info, {
    version: pkg.version,
    simd: true,
    threads: 2,
    build: 'relaxed-simd-threads',
    maxMemoryBytes: 2 ** 32 - 2 ** 16,
  });
  for (const x of r.results) assertGoldenOutput(x, golden);
  assert.deepEqual(two.golden, one.golden, 'the golden example differs between 1 and 2 threads');
  assert.ok(two.causalBitIdentical, `2 threads differ from 1 thread on the causal problem (max ${two.causalMaxDiff})`);
  assert.ok(seen.workers.length >= 1, 'no Web Worker was started');
  assert.ok(
    seen.workers.every((u) => /mha-threads\.worker|^blob:/.test(u)),
    `unexpected workers: ${seen.workers}`,
  );
  assert.deepEqual(seen.warnings, []);
  assert.deepEqual(seen.problems, []);
}

test('vite dev server, documented config + COOP/COEP: the example page and createMHA() match the spec example', async () => {
  const start = Date.now();
  const dev = await startDevServer('isolated', { isolation: true, exclude: true });
  try {
    // examples/vite's own page, as `npm run dev` shows it.
    const example = await openPage(dev.url, '/');
    try {
      await example.guard(
        example.page.waitForFunction(() => !document.querySelector('#result').textContent.includes('computing'), null, {
          timeout: 30_000,
        }),
      );
      assert.equal(await example.page.textContent('#info'), `mha-wasm ${pkg.version} (simd: true)`);
      assert.equal(await example.page.textContent('#result'), `last row: ${expectedLastRow()}`);
      assert.deepEqual(example.seen.problems, []);
      assert.deepEqual(example.seen.warnings, []);
    } finally {
      await example.close();
    }

    const p = await openTestPage(dev.url);
    const r = await computeInPage(p.evaluate, [{}], golden).finally(() => p.close());
    assert.equal(r.crossOriginIsolated, true);
    assert.deepEqual(r.results[0].info, {
      version: pkg.version,
      simd: true,
      threads: 1,
      build: 'relaxed-simd',
      maxMemoryBytes: 2 ** 32 - 2 ** 16,
    });
    assertGoldenOutput(r.results[0], golden);
    // Excluded from pre-bundling: the package is served from its own folder, and so is mha.wasm.
    const base = new URL('/node_modules/mha-wasm/dist/', dev.url).href;
    assert.ok(
      p.seen.requests.some((u) => u.startsWith(`${base}index.js`)),
      `index.js not served from ${base}`,
    );
    // Chromium has Relaxed SIMD: createMHA() runs the relaxed build, wasm and glue from the package folder.
    for (const file of ['mha-relaxed.wasm', 'mha-relaxed.js']) {
      assert.ok(
        p.seen.requests.some((u) => u.startsWith(`${base}${file}`)),
        `${file} not fetched from ${base}`,
      );
    }
    assert.deepEqual(p.seen.warnings, []);
    assert.deepEqual(p.seen.problems, []);
    assert.deepEqual(dev.serverLog, []);
  } finally {
    await dev.close();
  }
  console.log(`# dev server, single thread: ${Date.now() - start} ms`);
});

test('vite dev server + COOP/COEP, with and without optimizeDeps.exclude: threads: 2 runs the threaded build (relaxed-simd-threads in Chromium) on 2 threads, bit-identical to 1 thread', async () => {
  for (const exclude of [true, false]) {
    const start = Date.now();
    const dev = await startDevServer(exclude ? 'threads' : 'threads-prebundled', { isolation: true, exclude });
    try {
      const p = await openTestPage(dev.url);
      try {
        const r = await computeInPage(p.evaluate, [{}, { threads: 2 }], golden);
        assertThreaded(r, p.seen);
      } finally {
        await p.close();
      }
      assert.deepEqual(dev.serverLog, []);
    } finally {
      await dev.close();
      console.log(
        `# dev server${exclude ? '' : ' without optimizeDeps.exclude'}, threads: 2: ${Date.now() - start} ms`,
      );
    }
  }
});

test('vite dev server without COOP/COEP: threads: 2 falls back to 1 thread (simd) with one warning, same result', async () => {
  const start = Date.now();
  const dev = await startDevServer('plain', { isolation: false, exclude: true });
  try {
    const p = await openTestPage(dev.url);
    const r = await computeInPage(p.evaluate, [{}, { threads: 2 }, { threads: 2 }], golden).finally(() => p.close());
    assert.equal(r.crossOriginIsolated, false);
    for (const x of r.results) {
      assert.deepEqual(
        x.info,
        { version: pkg.version, simd: true, threads: 1, build: 'relaxed-simd', maxMemoryBytes: 2 ** 32 - 2 ** 16 },
        x.options,
      );
      assertGoldenOutput(x, golden);
      assert.ok(x.causalBitIdentical, `${x.options} differs from the first instance`);
    }
    // One warning for both threaded requests (once per reason), naming the missing cross-origin isolation.
    assert.equal(p.seen.warnings.length, 1, JSON.stringify(p.seen.warnings));
    assert.match(
      p.seen.warnings[0],
      new RegExp(
        '^mha-wasm: 2 threads requested, running single-threaded: the page is not ' +
          'cross-origin isolated \\(crossOriginIsolated is false\\): serve it with the headers Cross-Origin-Opener-Policy: ' +
          'same-origin and Cross-Origin-Embedder-Policy: require-corp \\(missing COOP/COEP headers\\)$',
      ),
    );
    assert.deepEqual(p.seen.workers, []);
    assert.ok(!p.seen.requests.some((u) => /mha-(relaxed-)?threads/.test(u)), 'the threaded build was fetched anyway');
    assert.deepEqual(p.seen.problems, []);
    assert.deepEqual(dev.serverLog, []);
  } finally {
    await dev.close();
  }
  console.log(`# dev server without COOP/COEP: ${Date.now() - start} ms`);
});

test('vite dev server WITHOUT optimizeDeps.exclude: the pre-bundled package still finds mha.wasm and matches', async () => {
  // Vite 8 pre-bundles with Rolldown, which rewrites the package's new URL('./mha.wasm', import.meta.url)
  // relative to the deps cache, so the URL still reaches node_modules/mha-wasm/dist/mha.wasm. Should a Vite
  // release stop doing so, the loader's error must name the URL fetched and what was expected.
  const start = Date.now();
  const dev = await startDevServer('prebundled', { isolation: true, exclude: false });
  try {
    const p = await openTestPage(dev.url);
    let r;
    try {
      const created = await p.evaluate(() =>
        window.mhaWasm.createMHA().then(
          () => 'ok',
          (error) => String(error),
        ),
      );
      if (created !== 'ok') {
        // Not the case with Vite 8.3.8. Were it to happen, the error must be the loader's own, naming the URL.
        assert.match(
          created,
          /^Error: mha-wasm: .*\.wasm.*expected the WebAssembly file mha\.wasm of mha-wasm/,
          "without optimizeDeps.exclude createMHA() failed without the loader's error",
        );
        assert.fail(`without optimizeDeps.exclude createMHA() now fails (with the loader's error): ${created}`);
      }
      r = await computeInPage(p.evaluate, [{}], golden);
    } finally {
      await p.close();
    }
    // The package really was pre-bundled (else this test would repeat the first one).
    const deps = new URL('/node_modules/.vite-prebundled/deps/mha-wasm.js', dev.url).href;
    assert.ok(
      p.seen.requests.some((u) => u.startsWith(deps)),
      `mha-wasm was not served pre-bundled from ${deps}`,
    );
    assert.deepEqual(r.results[0].info, {
      version: pkg.version,
      simd: true,
      threads: 1,
      build: 'relaxed-simd',
      maxMemoryBytes: 2 ** 32 - 2 ** 16,
    });
    assertGoldenOutput(r.results[0], golden);
    assert.ok(
      p.seen.requests.includes(new URL('/node_modules/mha-wasm/dist/mha-relaxed.wasm', dev.url).href),
      `mha-relaxed.wasm not fetched from the package folder: ${p.seen.requests.filter((u) => u.includes('.wasm'))}`,
    );
    assert.deepEqual(p.seen.warnings, []);
    assert.deepEqual(p.seen.problems, []);
    assert.deepEqual(dev.serverLog, []);
  } finally {
    await dev.close();
  }
  console.log(`# dev server without optimizeDeps.exclude: ${Date.now() - start} ms`);
});

test('vite build + vite preview with COOP/COEP: threads: 2 runs the threaded build (relaxed-simd-threads in Chromium) on 2 threads, bit-identical to 1 thread', async () => {
  const start = Date.now();
  const buildLog = [];
  const config = {
    ...documented,
    configFile: false,
    root: app,
    logLevel: 'warn',
    customLogger: recordingLogger(buildLog),
    build: {
      ...documented.build,
      outDir: 'dist',
      emptyOutDir: true,
      rolldownOptions: { input: { index: path.join(app, 'index.html'), test: path.join(app, 'test.html') } },
    },
    preview: { host: '127.0.0.1', port: 0, strictPort: true, headers: { ...ISOLATION_HEADERS } },
  };
  await build(config);
  assert.deepEqual(buildLog, [], 'vite build printed warnings');
  const assets = fs.readdirSync(path.join(app, 'dist/assets'));
  // The glue is imported by URL on the page and in every worker: it must be emitted as a file.
  assert.ok(
    assets.some((f) => /^mha-threads-.*\.wasm$/.test(f)),
    `no mha-threads*.wasm emitted: ${assets}`,
  );
  assert.ok(
    assets.some((f) => /^mha-threads-.*\.js$/.test(f)),
    `no mha-threads*.js glue emitted: ${assets}`,
  );
  // The Relaxed SIMD builds' wasm and glue, which Chromium runs.
  for (const name of ['mha-relaxed', 'mha-relaxed-threads']) {
    for (const ext of ['wasm', 'js']) {
      assert.ok(
        assets.some((f) => new RegExp(`^${name}-[^.]*\\.${ext}$`).test(f)),
        `no ${name}*.${ext} emitted: ${assets}`,
      );
    }
  }
  const workerFile = assets.find((f) => /^mha-threads\.worker-.*\.js$/.test(f));
  const bundle = assets
    .filter((f) => f.endsWith('.js'))
    .map((f) => fs.readFileSync(path.join(app, 'dist/assets', f), 'utf8'))
    .join('\n');
  // Inlined: a data: URL whose script is Emscripten's pthread worker.
  const inlined = [...bundle.matchAll(/data:text\/javascript;base64,([A-Za-z0-9+/=]+)/g)].some((m) =>
    Buffer.from(m[1], 'base64').toString('utf8').includes('ENVIRONMENT_IS_PTHREAD"]=true'),
  );
  console.log(
    `# vite build: the pthread worker is ${workerFile ? `emitted as ${workerFile}` : inlined ? 'inlined as a data: URL' : 'missing'}`,
  );
  assert.ok(workerFile || inlined, `the pthread worker script is neither emitted nor inlined: ${assets}`);

  const server = await preview(config);
  const close = track(() => server.close());
  try {
    const p = await openTestPage(server.resolvedUrls.local[0]);
    const r = await computeInPage(p.evaluate, [{}, { threads: 2 }], golden).finally(() => p.close());
    assertThreaded(r, p.seen);
  } finally {
    await close();
    console.log(`# vite build + preview, threads: 2: ${Date.now() - start} ms`);
  }
});
