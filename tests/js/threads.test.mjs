// The three builds and their selection (createMHA({ threads, simd })), through the public API in Node:
// which build each option picks; the golden set on the baseline and threaded builds; bit-identical
// results for 1, 2 and 3 threads on plain, causal, masked and cross-attention shapes; the single warning
// when threads are asked for but unavailable (SharedArrayBuffer removed, SIMD missing); dispose(); a
// clean, prompt exit of a Node script that uses threads; several instances at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createMHA } from '../../dist/index.js';
import {
  bitsEqual,
  checkOut,
  compare,
  loadGoldenCases,
  mulberry32,
  randomNormal,
  randomProblem,
  readGolden,
  referenceMHA,
  repoRoot,
  runChild,
} from './helpers.mjs';

const distIndex = pathToFileURL(path.join(repoRoot, 'dist/index.js')).href;

// ---------------------------------------------------------------------------------------------
// Selection

test('selection: default and threads: 1 load the SIMD build, single-threaded', async () => {
  for (const options of [undefined, {}, { threads: 1 }, { simd: 'auto' }]) {
    const mha = await createMHA(options);
    assert.deepEqual(
      { ...mha.info },
      { version: mha.info.version, simd: true, threads: 1, build: 'simd', maxMemoryBytes: 2 ** 32 - 2 ** 16 },
    );
    mha.dispose();
  }
});

test('selection: threads: 2 and 3 load the threaded build with that many threads', async () => {
  for (const threads of [2, 3]) {
    const mha = await createMHA({ threads });
    assert.equal(mha.info.build, 'simd-threads');
    assert.equal(mha.info.threads, threads);
    assert.equal(mha.info.simd, true);
    mha.dispose();
  }
});

test("selection: threads: 'auto' uses one thread per core, at most 8", async () => {
  const mha = await createMHA({ threads: 'auto' });
  const cores = Math.min(8, os.availableParallelism());
  assert.equal(mha.info.threads, cores);
  assert.equal(mha.info.build, cores > 1 ? 'simd-threads' : 'simd');
  mha.dispose();
});

test('selection: simd: false loads the baseline build (no SIMD, single-threaded)', async () => {
  const mha = await createMHA({ simd: false });
  assert.deepEqual(
    { ...mha.info },
    { version: mha.info.version, simd: false, threads: 1, build: 'baseline', maxMemoryBytes: 2 ** 32 - 2 ** 16 },
  );
  mha.dispose();
});

test('selection: wasmUrl / wasmBinary decide the build by the file given', async () => {
  const { readFileSync } = await import('node:fs');
  const cases = [
    ['mha.wasm', 'simd', 1],
    ['mha-baseline.wasm', 'baseline', 1],
    ['mha-threads.wasm', 'simd-threads', 2],
  ];
  const warn = console.warn;
  const warnings = [];
  console.warn = (...args) => warnings.push(args.join(' '));
  try {
    for (const [file, build, threads] of cases) {
      const wasmPath = path.join(repoRoot, 'dist', file);
      for (const options of [{ wasmUrl: wasmPath }, { wasmBinary: readFileSync(wasmPath) }]) {
        const mha = await createMHA({ ...options, threads: 2 });
        assert.equal(mha.info.build, build, `${file} ${Object.keys(options)[0]}`);
        assert.equal(mha.info.threads, threads);
        mha.dispose();
      }
    }
  } finally {
    console.warn = warn;
  }
  // Threads asked of a single-threaded file: said once per file.
  assert.equal(warnings.length, 4, JSON.stringify(warnings));
  assert.ok(warnings.every((w) => w.includes('is a single-threaded build (pass mha-threads.wasm for threads)')));
});

// ---------------------------------------------------------------------------------------------
// Correctness: the golden set on every build

const goldenCases = loadGoldenCases();
for (const [label, options] of [
  ['baseline', { simd: false }],
  ['simd-threads (3 threads)', { threads: 3 }],
]) {
  test(`golden set on the ${label} build: within tolerance of out64, NaN rows identical`, async () => {
    const mha = await createMHA(options);
    try {
      let worst = 0;
      for (const c of goldenCases) {
        const shape = {
          batch: c.batch,
          seqLen: c.seqLen,
          kvSeqLen: c.kvSeqLen,
          dModel: c.dModel,
          numHeads: c.numHeads,
        };
        const [q, k, v, out64, out32] = ['q', 'k', 'v', 'out64', 'out32'].map((role) => readGolden(c, role));
        const mask = c.hasMask ? readGolden(c, 'mask') : undefined;
        const r = checkOut(mha.multiHeadAttention(q, k, v, { ...shape, mask }), out64, out32);
        assert.ok(r.ok, `${c.name}: ${r.problem}`);
        worst = Math.max(worst, r.ratio);
      }
      console.log(
        `# ${label}: worst |ours - out64| / tolerance over ${goldenCases.length} golden cases: ${worst.toExponential(3)}`,
      );
    } finally {
      mha.dispose();
    }
  });
}

// Shapes large enough to go parallel (above the work threshold), with unbalanced units.
const SHAPES = [
  { name: 'plain (2,130,130,256,4)', batch: 2, seqLen: 130, kvSeqLen: 130, dModel: 256, numHeads: 4 },
  { name: 'causal (1,600,600,192,3)', batch: 1, seqLen: 600, kvSeqLen: 600, dModel: 192, numHeads: 3, causal: true },
  {
    name: 'masked cross (3,150,170,128,2)',
    batch: 3,
    seqLen: 150,
    kvSeqLen: 170,
    dModel: 128,
    numHeads: 2,
    mask: 'random',
  },
  {
    name: 'causal + padding mask (2,300,280,256,8)',
    batch: 2,
    seqLen: 300,
    kvSeqLen: 280,
    dModel: 256,
    numHeads: 8,
    causal: true,
    mask: 'padding',
  },
  { name: 'bert-like (2,128,128,768,12)', batch: 2, seqLen: 128, kvSeqLen: 128, dModel: 768, numHeads: 12 },
];

test('bit-identical results for 1, 2 and 3 threads (and the single-threaded SIMD build) on several shapes', async () => {
  const single = await createMHA();
  const threaded = [await createMHA({ threads: 1 }), await createMHA({ threads: 2 }), await createMHA({ threads: 3 })];
  assert.deepEqual(
    threaded.map((m) => m.info.threads),
    [1, 2, 3],
  );
  try {
    let seed = 1000;
    for (const shape of SHAPES) {
      const { q, k, v, options } = randomProblem(shape, seed++);
      const expected = single.multiHeadAttention(q, k, v, options);
      if (shape.batch * shape.seqLen <= 400) {
        // Sanity: the expected output is right (float64 JS reference), so we compare against something true.
        const ref = referenceMHA(q, k, v, options);
        const r = compare(expected, ref);
        assert.equal(r.specialMismatch, -1, shape.name);
        assert.ok(r.maxError < 1e-4, `${shape.name}: ${r.maxError}`);
      }
      for (const mha of threaded) {
        // twice: the pool is reused across calls
        for (let repeat = 0; repeat < 2; repeat++) {
          const out = mha.multiHeadAttention(q, k, v, options);
          assert.ok(
            bitsEqual(out, expected),
            `${shape.name}: ${mha.info.build} with ${mha.info.threads} threads differs from the single-threaded build`,
          );
        }
      }
    }
  } finally {
    single.dispose();
    for (const m of threaded) m.dispose();
  }
});

test('several instances coexist: two threaded and one single-threaded, interleaved calls, same bits', async () => {
  const a = await createMHA({ threads: 2 });
  const b = await createMHA({ threads: 3 });
  const c = await createMHA();
  try {
    const { q, k, v, options } = randomProblem(SHAPES[1], 77);
    const expected = c.multiHeadAttention(q, k, v, options);
    for (let i = 0; i < 3; i++) {
      assert.ok(bitsEqual(a.multiHeadAttention(q, k, v, options), expected));
      assert.ok(bitsEqual(b.multiHeadAttention(q, k, v, options), expected));
    }
    a.dispose();
    // b is unaffected by a's dispose
    assert.ok(bitsEqual(b.multiHeadAttention(q, k, v, options), expected));
  } finally {
    a.dispose();
    b.dispose();
    c.dispose();
  }
});

test('dispose() ends the pool; the instance still computes (on the calling thread) with the same bits', async () => {
  const mha = await createMHA({ threads: 2 });
  const { q, k, v, options } = randomProblem(SHAPES[0], 5);
  const before = mha.multiHeadAttention(q, k, v, options);
  assert.equal(mha.info.threads, 2);
  const infoBefore = mha.info;
  mha.dispose();
  assert.equal(mha.info.threads, 1, 'info reports the calling thread only once the pool has ended');
  assert.equal(infoBefore.threads, 2, 'an info object taken earlier is a snapshot');
  const after = mha.multiHeadAttention(q, k, v, options);
  assert.ok(bitsEqual(before, after));
  mha.dispose();
  mha.dispose(); // idempotent
});

// ---------------------------------------------------------------------------------------------
// Fallback and warnings, in child processes (each has its own module state and globals)

test('without SharedArrayBuffer: threads fall back to 1 with one console.warn naming the reason', async () => {
  const { code, stdout, stderr } = await runChild(`
    delete globalThis.SharedArrayBuffer;
    const warnings = [];
    console.warn = (...args) => warnings.push(args.join(' '));
    const { createMHA } = await import(${JSON.stringify(distIndex)});
    const a = await createMHA({ threads: 2 });
    const b = await createMHA({ threads: 'auto' });
    const x = new Float32Array(120).map((_, i) => Math.sin(i));
    const out = a.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
    console.log(JSON.stringify({ a: a.info, b: b.info, warnings, finite: out.every(Number.isFinite) }));
  `);
  assert.equal(code, 0, stderr);
  const r = JSON.parse(stdout);
  assert.equal(r.a.threads, 1);
  assert.equal(r.a.build, 'simd');
  assert.equal(r.b.threads, 1);
  assert.equal(r.finite, true);
  assert.equal(r.warnings.length, 1, `expected one warning, got ${JSON.stringify(r.warnings)}`);
  assert.match(
    r.warnings[0],
    /mha-wasm: 2 threads requested, running single-threaded: SharedArrayBuffer is not available/,
  );
});

test('without WebAssembly SIMD: auto selects the baseline build; threads warn once that they need SIMD', async () => {
  const { code, stdout, stderr } = await runChild(`
    // Simulates an engine without SIMD128: every module using a 0xfd (SIMD) opcode fails validation.
    const validate = WebAssembly.validate;
    WebAssembly.validate = (bytes) => (bytes.length < 100 && Array.from(bytes).includes(0xfd) ? false : validate(bytes));
    const warnings = [];
    console.warn = (...args) => warnings.push(args.join(' '));
    const { createMHA } = await import(${JSON.stringify(distIndex)});
    const a = await createMHA();
    const b = await createMHA({ threads: 3 });
    const c = await createMHA({ threads: 2 });
    console.log(JSON.stringify({ a: a.info, b: b.info, c: c.info, warnings }));
  `);
  assert.equal(code, 0, stderr);
  const r = JSON.parse(stdout);
  for (const info of [r.a, r.b, r.c]) {
    assert.equal(info.build, 'baseline');
    assert.equal(info.simd, false);
    assert.equal(info.threads, 1);
  }
  assert.equal(r.warnings.length, 1, JSON.stringify(r.warnings));
  assert.match(r.warnings[0], /3 threads requested, running single-threaded: this engine lacks WebAssembly SIMD128/);
});

test('simd: false with threads warns that the baseline build is single-threaded', async () => {
  const { code, stdout, stderr } = await runChild(`
    const warnings = [];
    console.warn = (...args) => warnings.push(args.join(' '));
    const { createMHA } = await import(${JSON.stringify(distIndex)});
    const a = await createMHA({ simd: false, threads: 2 });
    console.log(JSON.stringify({ a: a.info, warnings }));
  `);
  assert.equal(code, 0, stderr);
  const r = JSON.parse(stdout);
  assert.equal(r.a.build, 'baseline');
  assert.equal(r.a.threads, 1);
  assert.deepEqual(r.warnings.length, 1);
  assert.match(r.warnings[0], /simd: false selects the baseline build/);
});

for (const [label, breakWorker] of [
  ['missing from the package (a bundle that left it out)', (file) => fs.rmSync(file)],
  ['that throws when it loads', (file) => fs.writeFileSync(file, 'throw new Error("broken worker script");\n')],
]) {
  test(`a pthread worker file ${label}: threads fall back at once, with one warning, and the process lives on`, async () => {
    // Emscripten's glue rethrows a worker's error event, which in Node is an uncaught exception that
    // ends the process; createMHA must catch it and fall back to the single-threaded SIMD build.
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'mha-broken-worker-'));
    try {
      fs.cpSync(path.join(repoRoot, 'dist'), copy, { recursive: true });
      breakWorker(path.join(copy, 'mha-threads.node.worker.cjs'));
      const { code, stdout, stderr } = await runChild(`
        const warnings = [];
        console.warn = (...args) => warnings.push(args.join(' '));
        const { createMHA } = await import(${JSON.stringify(pathToFileURL(path.join(copy, 'index.js')).href)});
        const started = performance.now();
        const broken = await createMHA({ threads: 4 });  // 3 pooled workers, each failing
        const ms = performance.now() - started;
        const single = await createMHA();
        const x = new Float32Array(2 * 16 * 24).map((_, i) => Math.sin(i * 0.37));
        const opts = { batch: 2, seqLen: 16, dModel: 24, numHeads: 4, causal: true };
        const a = broken.multiHeadAttention(x, x, x, opts);
        const b = single.multiHeadAttention(x, x, x, opts);
        broken.dispose();
        console.log(JSON.stringify({ info: broken.info, ms, warnings, same: a.every((v, i) => Object.is(v, b[i])) }));
      `);
      assert.equal(code, 0, `the child died: ${stderr}`);
      const r = JSON.parse(stdout);
      assert.equal(r.info.build, 'simd');
      assert.equal(r.info.threads, 1);
      assert.equal(r.same, true, "the fallback instance gives the single-threaded build's bits");
      assert.ok(r.ms < 10000, `fell back after ${r.ms} ms (the start-up timeout is 20 s)`);
      assert.equal(r.warnings.length, 1, JSON.stringify(r.warnings));
      assert.match(
        r.warnings[0],
        /4 threads requested, running single-threaded: a worker of the threaded build failed to start \(worker sent an error! .*(Cannot find module|broken worker script)/,
      );
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: a Node script exits on its own

test('a Node script that creates a 3-thread instance, computes and disposes exits within 2 s of finishing', async () => {
  const { code, stdout, stderr, ms } = await runChild(`
    const { createMHA } = await import(${JSON.stringify(distIndex)});
    const mha = await createMHA({ threads: 3 });
    const n = 1 * 512 * 384;
    const x = new Float32Array(n).map((_, i) => Math.sin(i));
    const out = mha.multiHeadAttention(x, x, x, { batch: 1, seqLen: 512, dModel: 384, numHeads: 6, causal: true });
    const info = mha.info;
    mha.dispose();
    console.log(JSON.stringify({ info, finite: out.every(Number.isFinite), at: performance.timeOrigin + performance.now() }));
  `);
  const exitedAt = performance.timeOrigin + performance.now();
  assert.equal(code, 0, stderr);
  const r = JSON.parse(stdout);
  assert.equal(r.info.threads, 3);
  assert.equal(r.finite, true);
  const lingered = exitedAt - r.at;
  console.log(`# child ran ${ms.toFixed(0)} ms, exited ${lingered.toFixed(0)} ms after dispose()`);
  assert.ok(lingered < 2000, `the process lingered ${lingered.toFixed(0)} ms after dispose()`);
});

test('a Node script that forgets dispose() still exits (the workers do not hold the process)', async () => {
  const { code, stderr, ms } = await runChild(
    `
    const { createMHA } = await import(${JSON.stringify(distIndex)});
    const mha = await createMHA({ threads: 2 });
    const x = new Float32Array(120).map((_, i) => Math.sin(i));
    mha.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
  `,
    { timeoutMs: 10000 },
  );
  assert.equal(code, 0, stderr);
  console.log(`# child without dispose() exited after ${ms.toFixed(0)} ms`);
});

// ---------------------------------------------------------------------------------------------
// The baseline build holds no SIMD instruction (it must validate on engines without SIMD128)

test('mha-baseline.wasm has no SIMD opcodes; mha.wasm and mha-threads.wasm do (wasm-objdump)', async () => {
  const { spawnSync } = await import('node:child_process');
  const simdOps = (file) => {
    const r = spawnSync('wasm-objdump', ['-d', path.join(repoRoot, 'dist', file)], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    });
    assert.equal(r.status, 0, r.stderr);
    return (r.stdout.match(/\b(v128|[if](8x16|16x8|32x4|64x2))\.[a-z_0-9]+/g) ?? []).length;
  };
  assert.equal(simdOps('mha-baseline.wasm'), 0);
  assert.ok(simdOps('mha.wasm') > 100);
  assert.ok(simdOps('mha-threads.wasm') > 100);
});
