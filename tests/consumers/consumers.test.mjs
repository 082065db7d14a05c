// Consumer tests: the package as a user gets it. `npm pack` once, install the tarball into an empty
// temporary project (offline: mha-wasm has no dependencies), then use it from Node ESM, CommonJS,
// TypeScript (tsc --strict), and apps built by Vite, webpack 5 and esbuild, run in Chromium.
// The build tools are the versions pinned in the repository's devDependencies, run from its node_modules.
//
// Needs a built dist/ (npm run build). Env: MHA_GOLDEN_DIR (default tests/golden/v1),
// MHA_KEEP_CONSUMERS=1 keeps the temporary project and prints its path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import { launchChromium } from '../../scripts/lib/chromium.mjs';
import { bundleWithEsbuild } from './harness.mjs';
import { goldenDir } from '../js/helpers.mjs';
import { serve } from '../../scripts/serve.mjs';

const run = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '../..');
const fixtures = path.join(here, 'fixtures');
const bin = (p) => path.join(repoRoot, 'node_modules', p);
const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8'));

let tmp; // the temporary project
let tarball;
let browser;

async function sh(file, args, options = {}) {
  try {
    return await run(file, args, { maxBuffer: 64 << 20, ...options, env: { ...process.env, ...options.env } });
  } catch (error) {
    error.message += `\n--- stdout\n${error.stdout}\n--- stderr\n${error.stderr}`;
    throw error;
  }
}

const node = (args, options) => sh(process.execPath, args, options);

function copyDir(from, to) {
  fs.cpSync(from, to, { recursive: true, filter: (src) => !/[\\/](node_modules|dist)$/.test(src) });
}

before(async () => {
  assert.ok(fs.existsSync(path.join(repoRoot, 'dist/mha.wasm')), 'dist/ is not built: run npm run build');
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mha-wasm-consumers-'));
  const { stdout } = await sh('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: repoRoot });
  tarball = path.join(tmp, JSON.parse(stdout)[0].filename);
  fs.writeFileSync(
    path.join(tmp, 'package.json'),
    JSON.stringify({ name: 'mha-wasm-consumer', private: true, type: 'module' }, null, 2),
  );
  await sh('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], { cwd: tmp });
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  if (process.env.MHA_KEEP_CONSUMERS) console.log(`consumer project kept at ${tmp}`);
  else if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** Serves `root` (plus the golden files at /golden/) and loads `page` in Chromium; returns problems seen. */
async function openInChromium(root, pagePath, waitFor) {
  const server = await serve({ root, mounts: { '/golden/': goldenDir }, port: 0 });
  const page = await browser.newPage();
  const problems = [];
  // HTTP errors are reported with their URL (Chromium's console message has none); a missing favicon is fine.
  page.on(
    'console',
    (m) =>
      m.type() === 'error' && !m.text().startsWith('Failed to load resource') && problems.push(`console: ${m.text()}`),
  );
  page.on(
    'response',
    (r) => r.status() >= 400 && !r.url().endsWith('/favicon.ico') && problems.push(`HTTP ${r.status()}: ${r.url()}`),
  );
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  try {
    await page.goto(new URL(pagePath, server.url).href);
    const value = await waitFor(page);
    return { value, problems };
  } finally {
    await page.close();
    await server.close();
  }
}

const waitForResult = async (page) => {
  await page.waitForFunction(() => document.body.dataset.done === '1', null, { timeout: 30_000 });
  return page.evaluate(() => window.result);
};

function assertGolden(result, problems) {
  assert.equal(result.ok, true, result.error);
  assert.equal(result.length, 120);
  assert.equal(result.info.version, pkg.version);
  assert.equal(result.info.simd, true);
  assert.ok(result.maxError <= 1e-5, `max |out - out64| = ${result.maxError}`);
  assert.deepEqual(problems, []);
}

test('the tarball holds exactly the files that ship, with sizes reported', () => {
  const listing = fs
    .readdirSync(path.join(tmp, 'node_modules/mha-wasm'), { recursive: true })
    .filter((f) => fs.statSync(path.join(tmp, 'node_modules/mha-wasm', f)).isFile())
    .sort();
  assert.deepEqual(
    listing,
    [
      'CHANGELOG.md',
      'LICENSE',
      'README.md',
      'cjs/index.cjs',
      'cjs/index.d.cts',
      'dist/index.d.ts',
      'dist/index.js',
      'dist/mha-baseline.wasm',
      'dist/mha-relaxed-threads.js',
      'dist/mha-relaxed-threads.node.cjs',
      'dist/mha-relaxed-threads.wasm',
      'dist/mha-relaxed.js',
      'dist/mha-relaxed.wasm',
      'dist/mha-threads.js',
      'dist/mha-threads.node.cjs',
      'dist/mha-threads.node.worker.cjs',
      'dist/mha-threads.wasm',
      'dist/mha-threads.worker.js',
      'dist/mha.js',
      'dist/mha.wasm',
      'dist/version.d.ts',
      'dist/version.js',
      'docs/API.md',
      'package.json',
    ].map((f) => f.replaceAll('/', path.sep)),
  );
  const gzippedSize = {};
  for (const f of [
    'dist/mha.wasm',
    'dist/mha.js',
    'dist/index.js',
    'dist/mha-baseline.wasm',
    'dist/mha-threads.wasm',
    'dist/mha-threads.js',
    'dist/mha-relaxed.wasm',
    'dist/mha-relaxed.js',
    'dist/mha-relaxed-threads.wasm',
    'dist/mha-relaxed-threads.js',
  ]) {
    const bytes = fs.readFileSync(path.join(tmp, 'node_modules/mha-wasm', f));
    const gzipped = zlib.gzipSync(bytes, { level: 9 }).length;
    gzippedSize[f] = gzipped;
    console.log(`# ${f}: ${bytes.length} bytes, ${gzipped} gzipped`);
  }
  // The size budget, each Relaxed SIMD module under 74 kB gzipped (zlib level 9). Issue #15 set 40 kB for
  // the v0.2 options (the modules dropped musl's exp table, exceptions, std::thread's start-up, the float16
  // decode loaders' inf/NaN and unscaled variants, libc++'s mutex/condition_variable/chrono and tanhf, the
  // pthread runtime's stdout and emcc's unused proxying exports: 37.8 kB for mha-relaxed-threads.wasm);
  // v0.3's value heads of their own size, sinks, rope and float16 tensors in every kernel added 3.3 kB
  // (41.2 kB). The serving cache of docs/spec.md 4.6-4.7 added 8.6 kB to mha-relaxed-threads.wasm: per-sequence
  // lengths, the per-sequence decode plan and read (43.8 kB), then save/load with its parser, its reasons and
  // the CRC-32 (49.8 kB). The bfloat16 and int8 caches of docs/spec.md 4.8 added 7.5 kB: their storage,
  // codecs, the scalar kernel's two dtypes, the tiled prefill's rounding and save format 2 with its checks
  // (54.2 kB), then the bfloat16 and int8 loaders of the SIMD decode kernels (57.3 kB); the int8 cache's
  // one-row decode kernel, its block scales folded into the dot products, 1.8 kB (59.1 kB), and the decode
  // paths as functions of their own in a table instead of one inlined switch, 1.0 kB (60.1 kB). One codec per
  // cache dtype (issue 39) and the validators and reads compiled for size (core/cold.hpp): -0.8 kB (59.3 kB).
  // Serving (docs/spec.md Part 5; gzip -9 figures): the heap to 4 GiB with its checked allocator and the cache's lse, 0.3 kB
  // (59.6 kB); cache.reorder, 1.2 kB (60.7 kB); the shared prefix (its pass over shared keys, the merge of the
  // two states and its exact rows over both caches), 2.0 kB (62.7 kB); ring caches (their two runs of slots
  // merged as the prefix's states, the window rule, save format 3), 1.4 kB (64.1 kB). Long contexts (docs/spec.md
  // 5.1): the int4 cache (every codec switch, save format 4, its unpacking) 2.7 kB, integer arithmetic (its
  // decode path in each SIMD variant) 3.7 kB (70.5 kB); hence 72 kB. The integer loops reworked for 1.5-2.4x
  // their speed (one loop per row count and int4 or int8, two GQA rows sharing each widened row, int4 read as
  // stored) 2.5 kB (73.0 kB); hence 74 kB. Each is also held to its SIMD128 twin: a
  // relaxed module is that build with fused multiply-adds,
  // at most 10% larger.
  for (const f of ['dist/mha-relaxed.wasm', 'dist/mha-relaxed-threads.wasm']) {
    assert.ok(gzippedSize[f] < 74000, `${f}: ${gzippedSize[f]} bytes gzipped, budget 74 kB`);
  }
  for (const [relaxed, twin] of [
    ['dist/mha-relaxed.wasm', 'dist/mha.wasm'],
    ['dist/mha-relaxed-threads.wasm', 'dist/mha-threads.wasm'],
  ]) {
    assert.ok(
      gzippedSize[relaxed] <= 1.1 * gzippedSize[twin],
      `${relaxed}: ${gzippedSize[relaxed]} bytes gzipped, ${twin}: ${gzippedSize[twin]}`,
    );
  }
  console.log(`# tarball: ${fs.statSync(tarball).size} bytes`);
});

test('publint --strict and arethetypeswrong find no problem', async () => {
  await node([bin('publint/src/cli.js'), '--strict', repoRoot], { cwd: repoRoot });
  const { stdout } = await node(
    [
      bin('@arethetypeswrong/cli/dist/index.js'),
      tarball,
      '--format',
      'json',
      '--exclude-entrypoints',
      'mha.wasm',
      'mha-threads.wasm',
      'mha-baseline.wasm',
      'mha-relaxed.wasm',
      'mha-relaxed-threads.wasm',
    ],
    { cwd: tmp },
  );
  const report = JSON.parse(stdout); // attw also exits non-zero on any problem
  assert.equal(Object.keys(report.problems ?? {}).length, 0, stdout);
});

test('Node ESM: the spec example matches the PyTorch golden out64', async () => {
  fs.cpSync(path.join(fixtures, 'node'), path.join(tmp, 'node'), { recursive: true });
  const { stdout } = await node([path.join(tmp, 'node/golden.mjs'), goldenDir], { cwd: tmp });
  const r = JSON.parse(stdout);
  assert.equal(r.version, pkg.version);
  assertGolden({ ok: true, ...r }, []);
});

test('Node ESM: the README quick start (examples/node.mjs) runs against the installed package', async () => {
  fs.copyFileSync(path.join(repoRoot, 'examples/node.mjs'), path.join(tmp, 'quickstart.mjs'));
  const { stdout } = await node([path.join(tmp, 'quickstart.mjs')], { cwd: tmp });
  assert.match(stdout, /out has shape \[2, 5, 12\]/);
  assert.match(stdout, /last row: (-?\d\.\d{4} ?){12}/);
});

test('CommonJS: require() throws ERR_REQUIRE_ESM pointing to import(); import() from CommonJS works', async () => {
  fs.cpSync(path.join(fixtures, 'cjs'), path.join(tmp, 'cjs'), { recursive: true });
  const { stdout } = await node([path.join(tmp, 'cjs/consumer.cjs')], { cwd: tmp });
  const r = JSON.parse(stdout);
  assert.equal(r.requireError?.code, 'ERR_REQUIRE_ESM');
  assert.match(r.requireError.message, /ES module/);
  assert.ok(r.requireError.message.includes("await import('mha-wasm')"), r.requireError.message);
  assert.equal(r.importWorks, true);
});

test('TypeScript: a correct consumer compiles with tsc --strict; deliberate type errors do not', async () => {
  const dir = path.join(tmp, 'ts');
  fs.cpSync(path.join(fixtures, 'ts'), dir, { recursive: true });
  const tsc = bin('typescript/bin/tsc');
  // The fixture's tsconfig (strict, noEmit): good.ts under NodeNext and Bundler resolution, then bad.ts.
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tsconfig.json'), 'utf8'));
  for (const [file, resolution] of [
    ['good.ts', 'NodeNext'],
    ['good.ts', 'Bundler'],
  ]) {
    fs.writeFileSync(
      path.join(dir, `tsconfig.${file}.${resolution}.json`),
      JSON.stringify({
        ...config,
        compilerOptions: {
          ...config.compilerOptions,
          module: resolution === 'Bundler' ? 'ESNext' : 'NodeNext',
          moduleResolution: resolution,
        },
        files: [file],
      }),
    );
    await node([tsc, '-p', `tsconfig.${file}.${resolution}.json`], { cwd: dir });
  }
  fs.writeFileSync(path.join(dir, 'tsconfig.bad.json'), JSON.stringify({ ...config, files: ['bad.ts'] }));
  const failed = await node([tsc, '-p', 'tsconfig.bad.json'], { cwd: dir }).then(
    () => null,
    (e) => e,
  );
  assert.ok(failed, 'bad.ts compiled, but it holds deliberate type errors');
  const lines = failed.stdout.split('\n').filter((l) => l.includes('error TS'));
  assert.equal(lines.length, 5, failed.stdout);
  assert.match(failed.stdout, /bad\.ts\(7,\d+\): error TS2345[^]*?Property 'numHeads' is missing/);
  assert.match(lines[0], /bad\.ts\(7,.*TS2345/);
  assert.match(lines[1], /bad\.ts\(8,.*TS2345/);
  assert.match(lines[2], /bad\.ts\(9,.*TS2322/);
  assert.match(lines[3], /bad\.ts\(11,.*TS2345.*HeapTensor/);
  assert.match(lines[4], /bad\.ts\(12,.*TS2540.*'data'/);
});

test('Vite: examples/vite builds with no mha-wasm configuration, and its page computes in Chromium', async () => {
  const dir = path.join(tmp, 'vite-app');
  copyDir(path.join(repoRoot, 'examples/vite'), dir);
  // The tools come from the repository (offline); mha-wasm resolves from the temporary project.
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  delete manifest.devDependencies;
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  const { stdout, stderr } = await node([bin('vite/bin/vite.js'), 'build', '--logLevel', 'warn'], { cwd: dir });
  assert.equal(`${stdout}${stderr}`.trim(), '', 'vite build printed warnings');
  const assets = fs.readdirSync(path.join(dir, 'dist/assets'));
  assert.ok(
    assets.some((f) => /^mha-.*\.wasm$/.test(f)),
    `no mha*.wasm asset emitted: ${assets}`,
  );
  const { value, problems } = await openInChromium(path.join(dir, 'dist'), '/', async (page) => {
    await page.waitForFunction(() => !document.querySelector('#result').textContent.includes('computing'), null, {
      timeout: 30_000,
    });
    return { info: await page.textContent('#info'), result: await page.textContent('#result') };
  });
  assert.deepEqual(problems, []);
  assert.equal(value.info, `mha-wasm ${pkg.version} (simd: true)`);
  const { expectedLastRow } = await import('../js/helpers.mjs');
  assert.equal(value.result, `last row: ${expectedLastRow()}`);
});

test('webpack 5: builds with no configuration for mha-wasm and no warnings; the spec example matches in Chromium', async () => {
  const dir = path.join(tmp, 'webpack-app');
  copyDir(path.join(fixtures, 'webpack'), dir);
  fs.copyFileSync(path.join(fixtures, 'shared/golden.js'), path.join(dir, 'src/golden.js'));
  const { stdout } = await node([bin('webpack-cli/bin/cli.js'), '--config', 'webpack.config.cjs', '--json'], {
    cwd: dir,
  });
  const stats = JSON.parse(stdout.slice(stdout.indexOf('{')));
  assert.deepEqual(stats.errors, []);
  assert.deepEqual(stats.warnings, []);
  const files = fs.readdirSync(path.join(dir, 'dist'));
  assert.ok(
    files.some((f) => f.endsWith('.wasm')),
    `no .wasm emitted: ${files}`,
  );
  fs.copyFileSync(path.join(dir, 'index.html'), path.join(dir, 'dist/index.html'));
  const { value, problems } = await openInChromium(path.join(dir, 'dist'), '/', waitForResult);
  assertGolden(value, problems);
});

test('esbuild: bundles with the mha-wasm/mha.wasm subpath (file loader) + wasmUrl, no warnings; computes in Chromium', async () => {
  const dir = path.join(tmp, 'esbuild-app');
  copyDir(path.join(fixtures, 'esbuild'), dir);
  fs.copyFileSync(path.join(fixtures, 'shared/golden.js'), path.join(dir, 'src/golden.js'));
  await bundleWithEsbuild(bin('esbuild/lib/main.js'), dir);
  fs.copyFileSync(path.join(dir, 'index.html'), path.join(dir, 'dist/index.html'));
  const { value, problems } = await openInChromium(path.join(dir, 'dist'), '/', waitForResult);
  assertGolden(value, problems);
});

test('plain <script type="module">: the installed package imported from node_modules computes in Chromium', async () => {
  fs.writeFileSync(
    path.join(tmp, 'plain.html'),
    `<!doctype html><meta charset="utf-8"><body><script type="module">
    import { createMHA } from './node_modules/mha-wasm/dist/index.js';
    import { runGolden } from './golden.js';
    runGolden(createMHA, {});
  </script>`,
  );
  fs.copyFileSync(path.join(fixtures, 'shared/golden.js'), path.join(tmp, 'golden.js'));
  const { value, problems } = await openInChromium(tmp, '/plain.html', waitForResult);
  assertGolden(value, problems);
});

function assertLoaderErrors(r, base) {
  const v = pkg.version;
  assert.match(r.notFound, new RegExp(`^Error: mha-wasm: fetching ${base}missing\\.wasm failed: HTTP 404`));
  assert.ok(r.notFound.includes(`expected the WebAssembly file mha.wasm of mha-wasm ${v}`), r.notFound);
  assert.match(r.html, new RegExp(`^Error: mha-wasm: ${base}plain\\.html is not a WebAssembly file`));
  assert.ok(r.html.includes('magic bytes 00 61 73 6d'), r.html);
  assert.match(r.html, /starting 3c 21 64 6f, an HTML page.*served as text\/html/);
  assert.match(
    r.emptyModule,
    /^Error: mha-wasm: wasmBinary \(8 bytes\) does not match this script .*without a memory export/,
  );
  assert.match(
    r.versionMismatch,
    new RegExp(`^Error: mha-wasm: version mismatch: the script is ${v} but wasmBinary \\(\\d+ bytes\\) is 9\\.9\\.9`),
  );
  assert.equal(r.bothSources, 'TypeError: createMHA: expected at most one of wasmUrl and wasmBinary, got both');
  for (const key of ['defaultAfter', 'goodUrl', 'goodBinary']) assert.equal(r[key], `no error (version ${v})`, key);
}

test('loader errors in Node: 404, HTML page, foreign module, version mismatch name what was fetched and expected', async () => {
  const server = await serve({ root: tmp, port: 0 });
  try {
    fs.writeFileSync(path.join(tmp, 'plain.html'), '<!doctype html><title>SPA fallback</title>');
    fs.copyFileSync(path.join(fixtures, 'shared/errors.js'), path.join(tmp, 'errors.js'));
    fs.writeFileSync(
      path.join(tmp, 'errors-node.mjs'),
      `
      import { readFileSync } from 'node:fs';
      import { createMHA } from 'mha-wasm';
      import { loaderErrors } from './errors.js';
      const wasm = readFileSync(new URL('./node_modules/mha-wasm/dist/mha.wasm', import.meta.url));
      console.log(JSON.stringify(await loaderErrors(createMHA, process.argv[2], wasm)));`,
    );
    const { stdout } = await node([path.join(tmp, 'errors-node.mjs'), server.url], { cwd: tmp });
    assertLoaderErrors(JSON.parse(stdout), server.url);
  } finally {
    await server.close();
  }
});

test('loader errors in Chromium: the same cases give the same messages', async () => {
  fs.writeFileSync(path.join(tmp, 'plain.html'), '<!doctype html><title>SPA fallback</title>');
  fs.copyFileSync(path.join(fixtures, 'shared/errors.js'), path.join(tmp, 'errors.js'));
  let base;
  const { value, problems } = await openInChromium(tmp, '/plain.html', (page) => {
    base = new URL('/', page.url()).href;
    return page.evaluate(async () => {
      const { createMHA } = await import('/node_modules/mha-wasm/dist/index.js');
      const { loaderErrors } = await import('/errors.js');
      const wasm = await (await fetch('/node_modules/mha-wasm/dist/mha.wasm')).arrayBuffer();
      return loaderErrors(createMHA, location.origin, wasm);
    });
  });
  assertLoaderErrors(value, base);
  assert.deepEqual(problems, [`HTTP 404: ${base}missing.wasm`]);
});
