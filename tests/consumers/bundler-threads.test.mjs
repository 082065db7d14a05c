// The threaded build at run time under webpack 5 and esbuild, in Chromium. consumers.test.mjs builds
// webpack and esbuild apps but only runs one thread; vite-dev.test.mjs covers Vite with threads. Here an
// app is built by each bundler from the `npm pack` tarball installed into an empty temporary project
// (offline), served by scripts/serve.mjs, and driven in Chromium:
//
//   - with COOP/COEP: createMHA({ threads: 2 }) runs simd-threads on 2 threads, with no warning, at least
//     one Web Worker started from the worker script the bundler emitted (webpack) or the copy next to the
//     bundle (esbuild); the spec's golden example matches out64 within 1e-5, and a seeded causal problem
//     large enough for the pool is bit-identical to one thread;
//   - the same built app without COOP/COEP: threads: 2 falls back to one thread with exactly one warning,
//     naming the missing cross-origin isolation, and no worker.
//
// webpack: the fixture's webpack.config.cjs (nothing mha-wasm specific). esbuild: as the README documents
// it (mha.wasm through the `file` loader and wasmUrl for single-threaded instances; mha-threads.js,
// mha-threads.worker.js, mha-threads.wasm and mha.wasm served next to the bundle: the threaded build and
// its single-threaded fallback load from there). Tools are the repository's pinned devDependencies.
//
// Needs a built dist/ (npm run build). Env: MHA_GOLDEN_DIR as the other suites, MHA_KEEP_CONSUMERS=1
// keeps the temporary project and prints its path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from '../../scripts/lib/chromium.mjs';
import { serve } from '../../scripts/serve.mjs';
import {
  repoRoot,
  sh,
  installPackedTarball,
  specGolden,
  openResources,
  computeInPage,
  assertGoldenOutput,
  bundleWithEsbuild,
} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.join(here, 'fixtures');
const bin = (p) => path.join(repoRoot, 'node_modules', p);
const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8'));

/** The spec's example, and a problem big enough for the threaded kernel to split it (>= 4e6 flops). */
/** The threaded build's browser files, as the package ships them in dist/. */
const THREAD_FILES = Object.freeze(['mha-threads.js', 'mha-threads.worker.js', 'mha-threads.wasm']);
/** The Relaxed SIMD twins, which Chromium runs: threaded (with the same worker script), and single-threaded. */
const RELAXED_THREAD_FILES = Object.freeze(['mha-relaxed-threads.js', 'mha-relaxed-threads.wasm']);
const RELAXED_FILES = Object.freeze(['mha-relaxed.js', 'mha-relaxed.wasm']);
/** Every file an app must have next to its bundle (esbuild) or emitted (webpack). */
const ASSET_FILES = Object.freeze([...THREAD_FILES, ...RELAXED_THREAD_FILES, ...RELAXED_FILES]);
/** Per test: every wait is bounded well below this, so a test fails rather than hangs. */
const TEST_TIMEOUT = 180_000;
const FALLBACK_WARNING = new RegExp(
  '^mha-wasm: 2 threads requested, running single-threaded: the page is not ' +
    'cross-origin isolated \\(crossOriginIsolated is false\\): serve it with the headers Cross-Origin-Opener-Policy: ' +
    'same-origin and Cross-Origin-Embedder-Policy: require-corp \\(missing COOP/COEP headers\\)$',
);

let tmp; // the temporary project, with mha-wasm installed from the tarball
let golden; // { q, k, v, out64 } of the spec's example
let browser;
const resources = openResources(); // servers and pages still open, closed in after() if a test failed midway
const track = resources.track;

before(async () => {
  assert.ok(fs.existsSync(path.join(repoRoot, 'dist/mha-threads.wasm')), 'dist/ is not built: run npm run build');
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mha-wasm-bundler-threads-'));
  fs.writeFileSync(
    path.join(tmp, 'package.json'),
    JSON.stringify({ name: 'mha-wasm-bundler-threads', private: true, type: 'module' }, null, 2),
  );
  await installPackedTarball(tmp);
  golden = specGolden();
  browser = await launchChromium();
});

after(async () => {
  await resources.closeAll();
  await browser?.close();
  if (process.env.MHA_KEEP_CONSUMERS) console.log(`bundler-threads project kept at ${tmp}`);
  else if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** Builds each app once (the isolated and the non-isolated tests serve the same build). */
const built = new Map();
function once(name, buildApp) {
  if (!built.has(name)) built.set(name, buildApp());
  return built.get(name);
}

/**
 * webpack 5 with the consumer fixture's webpack.config.cjs, unchanged. Returns the output folder and the
 * emitted name of each threaded file (webpack hashes asset names), from webpack's stats.
 */
function buildWebpack() {
  return once('webpack', async () => {
    const start = Date.now();
    const dir = path.join(tmp, 'webpack-app');
    fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
    fs.copyFileSync(path.join(fixtures, 'webpack/webpack.config.cjs'), path.join(dir, 'webpack.config.cjs'));
    fs.copyFileSync(path.join(fixtures, 'threads/webpack-entry.js'), path.join(dir, 'src/main.js'));
    const { stdout } = await sh(
      process.execPath,
      [bin('webpack-cli/bin/cli.js'), '--config', 'webpack.config.cjs', '--json'],
      { cwd: dir },
    );
    const stats = JSON.parse(stdout.slice(stdout.indexOf('{')));
    assert.deepEqual(stats.errors, []);
    assert.deepEqual(stats.warnings, []);
    const emitted = {};
    for (const file of ASSET_FILES) {
      const asset = stats.assets.find((a) => a.info?.sourceFilename?.endsWith(`node_modules/mha-wasm/dist/${file}`));
      assert.ok(
        asset,
        `webpack did not emit ${file}: ${JSON.stringify(stats.assets.map((a) => [a.name, a.info?.sourceFilename]))}`,
      );
      assert.ok(fs.existsSync(path.join(dir, 'dist', asset.name)), `${asset.name} (${file}) is not in dist/`);
      emitted[file] = asset.name;
    }
    fs.copyFileSync(path.join(fixtures, 'threads/webpack.html'), path.join(dir, 'dist/index.html'));
    console.log(
      `# webpack build: ${Date.now() - start} ms; ${ASSET_FILES.map((f) => `${f} -> ${emitted[f]}`).join(', ')}`,
    );
    return { root: path.join(dir, 'dist'), emitted };
  });
}

/**
 * esbuild as the README documents it: the `file` loader for mha-wasm/mha.wasm, and the threaded files plus
 * mha.wasm copied next to the bundle (esbuild leaves new URL('./mha-threads.js', import.meta.url) as it
 * is; the fallback of createMHA({ threads }) loads new URL('./mha.wasm', import.meta.url)).
 */
function buildEsbuild() {
  return once('esbuild', async () => {
    const start = Date.now();
    const dir = path.join(tmp, 'esbuild-app');
    fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
    fs.copyFileSync(path.join(fixtures, 'threads/esbuild-entry.js'), path.join(dir, 'src/main.js'));
    await bundleWithEsbuild(bin('esbuild/lib/main.js'), dir);
    const bundle = fs.readFileSync(path.join(dir, 'dist/main.js'), 'utf8');
    // What makes the copies necessary: the bundle still points next to itself.
    for (const file of ASSET_FILES) {
      assert.ok(
        bundle.includes(`new URL("./${file}",import.meta.url)`),
        `the bundle no longer has new URL("./${file}", import.meta.url)`,
      );
      fs.copyFileSync(path.join(tmp, 'node_modules/mha-wasm/dist', file), path.join(dir, 'dist', file));
    }
    // Found by this suite: without this copy the fallback of createMHA({ threads: 2 }) got HTTP 404.
    fs.copyFileSync(path.join(tmp, 'node_modules/mha-wasm/dist/mha.wasm'), path.join(dir, 'dist/mha.wasm'));
    fs.copyFileSync(path.join(fixtures, 'threads/esbuild.html'), path.join(dir, 'dist/index.html'));
    console.log(
      `# esbuild build: ${Date.now() - start} ms; dist/: ${fs.readdirSync(path.join(dir, 'dist')).sort().join(', ')}`,
    );
    return { root: path.join(dir, 'dist'), emitted: Object.fromEntries(ASSET_FILES.map((f) => [f, f])) };
  });
}

/**
 * Serves `root` (with or without COOP/COEP) and opens its page. Records what the tests assert on: console
 * errors, page errors, HTTP errors (with their URL), console warnings, the workers started and the URLs
 * requested. `guard(promise)` bounds every wait: 30 s, or 250 ms after the page reports an uncaught error
 * or a warning about a worker (a worker that failed to load, seen at once; a start-up that stalls shows up
 * only as createMHA's fallback warning after its 20 s timeout).
 */
async function openApp(root, { isolation }) {
  const server = await serve({ root, port: 0, isolation });
  const closeServer = track(() => server.close());
  const page = await browser.newPage();
  const closePage = track(() => page.close());
  const seen = { problems: [], warnings: [], workers: [], requests: [] };
  let failFast;
  const pageFailed = new Promise((_, reject) => {
    failFast = reject;
  });
  pageFailed.catch(() => {});
  const report = (what) =>
    setTimeout(
      () =>
        failFast(
          new Error(
            `${what}\nproblems: ${JSON.stringify(seen.problems)}\n` +
              `warnings: ${JSON.stringify(seen.warnings)}\nworkers: ${JSON.stringify(seen.workers)}`,
          ),
        ),
      250,
    );
  page.on('console', (m) => {
    if (m.type() === 'error') seen.problems.push(`console error: ${m.text()}`);
    if (m.type() === 'warning') {
      seen.warnings.push(m.text());
      if (/worker/i.test(m.text())) report(`the page warned about a worker: ${m.text()}`);
    }
  });
  page.on('pageerror', (e) => {
    seen.problems.push(`pageerror: ${e.message}`);
    report(`the page reported an uncaught error: ${e.message}`);
  });
  page.on('response', (r) => r.status() >= 400 && seen.problems.push(`HTTP ${r.status()}: ${r.url()}`));
  page.on('requestfailed', (r) => seen.problems.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));
  page.on('request', (r) => seen.requests.push(r.url()));
  page.on('worker', (w) => seen.workers.push(w.url()));
  const guard = (promise) => {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `no answer from the page within 30 s; problems: ${JSON.stringify(seen.problems)}, ` +
                `warnings: ${JSON.stringify(seen.warnings)}, workers: ${JSON.stringify(seen.workers)}`,
            ),
          ),
        30_000,
      );
    });
    return Promise.race([promise, pageFailed, timeout]).finally(() => clearTimeout(timer));
  };
  await guard(page.goto(server.url, { timeout: 30_000 }));
  await guard(page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 30_000 }));
  return {
    url: server.url,
    seen,
    evaluate: (fn, arg) => guard(page.evaluate(fn, arg)),
    close: async () => {
      await closePage();
      await closeServer();
    },
  };
}

/**
 * In the page: one instance per entry of `list` (in order, each disposed after use): 'one' is the app's
 * single-threaded createMHA (createMHA() for webpack, createMHA({ wasmUrl }) for esbuild), 'two' is
 * createMHA({ threads: 2 }). Each computes the golden example and the seeded causal problem (twice).
 * Returns each instance's info, its golden output, whether its causal output has the same bits as the
 * first instance's, and crossOriginIsolated.
 */
const timings = (r) =>
  r.results.map((x) => `${x.which}: createMHA ${x.createMs} ms, causal call ${x.causalMs} ms`).join('; ');

/**
 * Threads with COOP/COEP: relaxed-simd-threads (Chromium has Relaxed SIMD) on 2 threads from the app's own
 * threaded files; the 1-thread instance is `singleBuild` (esbuild's passes wasmUrl = mha.wasm: 'simd'),
 * and where it is the same kernel the bits are equal.
 */
async function checkThreaded(name, app, singleBuild = 'relaxed-simd') {
  const p = await openApp(app.root, { isolation: true });
  let r;
  try {
    r = await computeInPage(p.evaluate, ['one', 'two'], golden);
  } finally {
    await p.close();
  }
  const { seen } = p;
  assert.equal(r.crossOriginIsolated, true, 'the page is not cross-origin isolated: COOP/COEP headers missing?');
  const [one, two] = r.results;
  assert.deepEqual(one.info, {
    version: pkg.version,
    simd: true,
    threads: 1,
    build: singleBuild,
    maxMemoryBytes: 2 ** 32 - 2 ** 16,
  });
  assert.deepEqual(
    two.info,
    { version: pkg.version, simd: true, threads: 2, build: 'relaxed-simd-threads', maxMemoryBytes: 2 ** 32 - 2 ** 16 },
    `threads: 2 did not run the threaded build; warnings: ${JSON.stringify(seen.warnings)}`,
  );
  for (const x of r.results) assertGoldenOutput(x, golden);
  if (two.info.build === `${singleBuild}-threads`) {
    assert.deepEqual(two.golden, one.golden, 'the golden example differs between 1 and 2 threads');
    assert.ok(
      two.causalBitIdentical,
      `2 threads differ from 1 thread on the causal problem (max ${two.causalMaxDiff})`,
    );
  }
  assert.deepEqual(seen.warnings, [], 'warnings (a fallback?)');
  assert.deepEqual(seen.problems, []);
  // The workers start from the worker script the app serves (Emscripten's glue appends nothing; the
  // package adds Vite's classic-worker marker to http(s) URLs, which other servers ignore).
  const workerUrl = new URL(app.emitted['mha-threads.worker.js'], p.url);
  assert.ok(seen.workers.length >= 1, 'no Web Worker was started');
  for (const w of seen.workers) {
    const u = new URL(w);
    assert.equal(`${u.origin}${u.pathname}`, workerUrl.href, `a worker started from ${w}, not from ${workerUrl.href}`);
  }
  for (const file of RELAXED_THREAD_FILES) {
    const url = new URL(app.emitted[file], p.url).href;
    assert.ok(seen.requests.includes(url), `${file} was not fetched from ${url}: ${seen.requests}`);
  }
  console.log(`# ${name}, threads: 2: ${seen.workers.length} worker(s) from ${workerUrl.pathname}; ${timings(r)}`);
}

/** The same app without COOP/COEP: threads: 2 falls back to 1 thread (relaxed-simd), with one warning. */
async function checkFallback(name, app, singleBuild = 'relaxed-simd') {
  const p = await openApp(app.root, { isolation: false });
  let r;
  try {
    r = await computeInPage(p.evaluate, ['one', 'two', 'two'], golden);
  } finally {
    await p.close();
  }
  const { seen } = p;
  assert.equal(r.crossOriginIsolated, false);
  for (const [i, x] of r.results.entries()) {
    const build = i === 0 ? singleBuild : 'relaxed-simd';
    assert.deepEqual(
      x.info,
      { version: pkg.version, simd: true, threads: 1, build, maxMemoryBytes: 2 ** 32 - 2 ** 16 },
      x.options,
    );
    assertGoldenOutput(x, golden);
    if (build === singleBuild) assert.ok(x.causalBitIdentical, `${x.options} differs from the first instance`);
  }
  // One warning for both threaded requests (once per reason), naming the missing cross-origin isolation.
  assert.equal(seen.warnings.length, 1, JSON.stringify(seen.warnings));
  assert.match(seen.warnings[0], FALLBACK_WARNING);
  assert.deepEqual(seen.workers, []);
  const threaded = [...THREAD_FILES, ...RELAXED_THREAD_FILES].map((f) => new URL(app.emitted[f], p.url).href);
  assert.deepEqual(
    seen.requests.filter((u) => threaded.some((t) => u.startsWith(t))),
    [],
    'the threaded build was fetched anyway',
  );
  assert.deepEqual(seen.problems, []);
  console.log(`# ${name} without COOP/COEP: ${timings(r)}`);
}

test(
  'webpack 5 (fixture config) + COOP/COEP: threads: 2 runs the threaded build (relaxed-simd-threads in Chromium) on 2 threads from the emitted worker, bit-identical to 1 thread',
  { timeout: TEST_TIMEOUT },
  async () => {
    const start = Date.now();
    await checkThreaded('webpack', await buildWebpack());
    console.log(`# webpack + COOP/COEP, threads: 2: ${Date.now() - start} ms`);
  },
);

test(
  'webpack 5, the same app without COOP/COEP: threads: 2 falls back to 1 thread with one warning',
  { timeout: TEST_TIMEOUT },
  async () => {
    const start = Date.now();
    await checkFallback('webpack', await buildWebpack());
    console.log(`# webpack without COOP/COEP: ${Date.now() - start} ms`);
  },
);

test(
  'esbuild (README setup: threaded files next to the bundle) + COOP/COEP: threads: 2 runs relaxed-simd-threads on 2 threads (the 1-thread instance, given mha.wasm, is simd)',
  { timeout: TEST_TIMEOUT },
  async () => {
    const start = Date.now();
    await checkThreaded('esbuild', await buildEsbuild(), 'simd');
    console.log(`# esbuild + COOP/COEP, threads: 2: ${Date.now() - start} ms`);
  },
);

test(
  'esbuild (README setup), the same app without COOP/COEP: threads: 2 falls back to 1 thread with one warning',
  { timeout: TEST_TIMEOUT },
  async () => {
    const start = Date.now();
    await checkFallback('esbuild (README setup)', await buildEsbuild(), 'simd');
    console.log(`# esbuild (README setup) without COOP/COEP: ${Date.now() - start} ms`);
  },
);
