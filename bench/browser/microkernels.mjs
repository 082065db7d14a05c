#!/usr/bin/env node
// The QK^T and PV micro-kernels of both SIMD variants (bench/kernel/microkernel_timing.cpp, built as
// build/wasm/mha_microkernel_timing{,_relaxed}.cjs) in Chromium, beside the ceiling micro-benchmarks of
// bench/lib/ceiling.mjs (mul+add, and its relaxed_madd twin where that module has it), alternating for
// `--rounds` rounds; prints each figure's best over the rounds and the ratios. Each harness runs in a
// page of its own (a second Emscripten glue evaluated in the same page ends it).
//   cmake --build build/wasm --target mha_microkernel_timing mha_microkernel_timing_relaxed
//   node bench/browser/microkernels.mjs [--rounds 3]
import { launchChromium } from '../../scripts/lib/chromium.mjs';
import { startTestServer } from '../../scripts/lib/engines.mjs';
import { option } from './bench-page.mjs';

const args = process.argv.slice(2);
const rounds = Number(option(args, '--rounds', 3));

const server = await startTestServer();
const browser = await launchChromium();
const base = new URL(server.url).origin;

/** Runs `fn(arg)` in a fresh bench page. */
async function inPage(fn, arg) {
  const page = await browser.newPage();
  try {
    await page.goto(`${base}/bench/browser/index.html`);
    await page.waitForFunction(() => window.__benchReady === true);
    return await page.evaluate(fn, arg);
  } finally {
    await page.close();
  }
}

/** The ceilings of bench/lib/ceiling.mjs: { 'ceiling mul+add': GFLOP/s, 'ceiling relaxed_madd'?: ... }. */
const ceilings = () =>
  inPage(async () => {
    const ceiling = await import('/bench/lib/ceiling.mjs');
    const out = { 'ceiling mul+add': ceiling.measureCeiling({ trials: 7 }).gflops };
    if (typeof ceiling.hasRelaxedSimd === 'function' && ceiling.hasRelaxedSimd()) {
      out['ceiling relaxed_madd'] = ceiling.measureCeiling({ trials: 7, fma: true }).gflops;
    }
    return out;
  });

/** One harness's lines `variant kernel gflops`, as { 'variant kernel': GFLOP/s }. */
const harness = (name) =>
  inPage(async (name) => {
    const text = await (await fetch(`/build/wasm/${name}.cjs`)).text();
    const lines = await new Promise((resolve, reject) => {
      const printed = [];
      globalThis.Module = {
        arguments: ['60'],
        locateFile: (file) => `/build/wasm/${file}`,
        print: (line) => printed.push(line),
        onAbort: (what) => reject(new Error(`${name} aborted: ${what}`)),
        postRun: [() => resolve(printed)],
      };
      (0, eval)(text);
    });
    return Object.fromEntries(
      lines.map((line) => line.split(' ')).map(([variant, kernel, gflops]) => [`${variant} ${kernel}`, Number(gflops)]),
    );
  }, name);

try {
  const best = {};
  for (let r = 0; r < rounds; r++) {
    for (const figures of [
      await ceilings(),
      await harness('mha_microkernel_timing'),
      await harness('mha_microkernel_timing_relaxed'),
    ]) {
      for (const [key, value] of Object.entries(figures)) best[key] = Math.max(best[key] ?? 0, value);
    }
  }
  console.log(`Chromium ${browser.version()}, best of ${rounds} rounds (GFLOP/s):`);
  for (const [key, value] of Object.entries(best)) console.log(`  ${key.padEnd(24)} ${value.toFixed(1)}`);
  const fmaCeiling = best['ceiling relaxed_madd'];
  for (const kernel of ['qk_tile', 'qk_tile+max', 'pv_tile']) {
    const relaxed = best[`relaxed ${kernel}`],
      fixed = best[`simd128 ${kernel}`];
    console.log(
      `  ${kernel}: relaxed / simd128 ${(relaxed / fixed).toFixed(2)}x; simd128 ${((100 * fixed) / best['ceiling mul+add']).toFixed(0)} % of the mul+add ceiling` +
        (fmaCeiling ? `; relaxed ${((100 * relaxed) / fmaCeiling).toFixed(0)} % of the relaxed_madd ceiling` : ''),
    );
  }
} finally {
  await browser.close();
  await server.close();
}
