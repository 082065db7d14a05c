// What the run-time consumer suites (vite-dev, bundler-threads) share: the packed tarball installed into
// a temporary app, cleanup of servers and pages a failed test left open, and the in-page computation that
// compares 1 and 2 threads on the spec's golden example and on a causal problem big enough for the pool.
// The esbuild build as the README documents it is shared with the consumers suite too.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadGoldenCases, readGolden, compare } from '../js/helpers.mjs';

const run = promisify(execFile);
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export const GOLDEN_SHAPE = Object.freeze({ batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
export const CAUSAL_SHAPE = Object.freeze({
  batch: 1,
  seqLen: 384,
  kvSeqLen: 384,
  dModel: 256,
  numHeads: 4,
  causal: true,
});

/** Runs a command; a failure carries its stdout and stderr. */
export async function sh(file, args, options = {}) {
  try {
    return await run(file, args, { maxBuffer: 64 << 20, timeout: 120_000, ...options });
  } catch (error) {
    error.message += `\n--- stdout\n${error.stdout}\n--- stderr\n${error.stderr}`;
    throw error;
  }
}

/** `npm pack` of the repository into `dir`, then an offline install of that tarball in `dir`. */
export async function installPackedTarball(dir) {
  const { stdout } = await sh('npm', ['pack', '--json', '--pack-destination', dir], { cwd: repoRoot });
  const tarball = path.join(dir, JSON.parse(stdout)[0].filename);
  await sh('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], { cwd: dir });
}

/** q, k, v and out64 of the spec's example (batch 2, seq 5, d_model 12, 3 heads). */
export function specGolden() {
  const c = loadGoldenCases().find((x) => x.name === 'example_b2_s5_d12_h3');
  return Object.fromEntries(['q', 'k', 'v', 'out64'].map((role) => [role, readGolden(c, role)]));
}

/**
 * Servers and pages still open: `track(close)` registers one and returns its close function (which
 * unregisters it); `closeAll()` in after() closes whatever a failed test left open, newest first.
 */
export function openResources() {
  const closers = new Set();
  return {
    track(close) {
      const once = async () => {
        closers.delete(once);
        await close();
      };
      closers.add(once);
      return once;
    },
    async closeAll() {
      for (const close of [...closers].reverse()) await close().catch(() => {});
    },
  };
}

/**
 * In the page (`evaluate` = page.evaluate): for each entry of `list` ('one': the page's
 * window.mhaWasm.singleThreadOptions, {} when it has none; 'two': { threads: 2 }; or an options object)
 * an instance computes the golden example and the seeded causal problem twice, then is disposed. Returns
 * per entry its info, golden output, whether the causal output has the first entry's bits, and timings.
 */
export function computeInPage(evaluate, list, golden) {
  return evaluate(
    async ([list, goldenShape, causalShape, q, k, v]) => {
      const { createMHA, singleThreadOptions = {} } = window.mhaWasm;
      let seed = 12345;
      const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296 - 0.5;
      const { batch: B, seqLen: S, kvSeqLen: T, dModel: D } = causalShape;
      const cq = Float32Array.from({ length: B * S * D }, random);
      const ck = Float32Array.from({ length: B * T * D }, random);
      const cv = Float32Array.from({ length: B * T * D }, random);
      const results = [];
      let first;
      for (const which of list) {
        const options = which === 'one' ? singleThreadOptions : which === 'two' ? { threads: 2 } : which;
        const started = performance.now();
        const mha = await createMHA(options);
        const createMs = performance.now() - started;
        const info = { ...mha.info };
        const out = mha.multiHeadAttention(new Float32Array(q), new Float32Array(k), new Float32Array(v), goldenShape);
        const t0 = performance.now();
        const causal = mha.multiHeadAttention(cq, ck, cv, causalShape);
        const causalMs = performance.now() - t0;
        const again = mha.multiHeadAttention(cq, ck, cv, causalShape);
        first ??= causal;
        const bits = (a) => new Uint32Array(a.buffer, a.byteOffset, a.length);
        const same = (a, b) => bits(a).every((x, i) => x === bits(b)[i]);
        let maxDiff = 0;
        for (let i = 0; i < causal.length; i++) maxDiff = Math.max(maxDiff, Math.abs(causal[i] - first[i]));
        results.push({
          which,
          options: String(JSON.stringify(options)),
          info,
          golden: Array.from(out),
          causalBitIdentical: same(causal, first) && same(again, first),
          causalMaxDiff: maxDiff,
          causalFinite: causal.every(Number.isFinite),
          createMs: Math.round(createMs),
          causalMs: Math.round(causalMs),
        });
        mha.dispose();
      }
      return { crossOriginIsolated: globalThis.crossOriginIsolated, results };
    },
    [list, GOLDEN_SHAPE, CAUSAL_SHAPE, Array.from(golden.q), Array.from(golden.k), Array.from(golden.v)],
  );
}

/** One entry of computeInPage: the golden example within 1e-5 of out64, and a finite causal output. */
export function assertGoldenOutput(result, golden) {
  const { maxError } = compare(Float32Array.from(result.golden), golden.out64);
  assert.ok(maxError <= 1e-5, `${result.options}: max |out - out64| = ${maxError}`);
  assert.ok(result.causalFinite, `${result.options}: the causal problem gave non-finite values`);
}

/**
 * Bundles `dir`/src/main.js into `dir`/dist with esbuild as the README documents it (ESM for the browser,
 * the `file` loader for .wasm), and asserts that the build has no errors and no warnings.
 * `esbuildMain`: the path of the esbuild package's lib/main.js in the test's own install.
 */
export async function bundleWithEsbuild(esbuildMain, dir) {
  const esbuild = await import(esbuildMain).then((m) => m.default ?? m);
  const result = await esbuild.build({
    absWorkingDir: dir,
    entryPoints: ['src/main.js'],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    outdir: 'dist',
    loader: { '.wasm': 'file' },
    minify: true,
    logLevel: 'silent',
  });
  assert.deepEqual(result.errors, []);
  assert.deepEqual(
    result.warnings.map((w) => w.text),
    [],
  );
}
