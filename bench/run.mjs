#!/usr/bin/env node
// mha-wasm benchmark driver. Every (implementation, shape) pair runs in its own child process with a
// timeout, so an OOM or crash costs only that row; then every interleaved job (bench/lib/jobs.mjs) runs in
// one child of its own. See bench/README.md.
//
//   node bench/run.mjs [--shapes a,b] [--group v1,options,pairs,decode,serving] [--impls a,b] [--quick] [--budget ms]
//                      [--rounds n] [--timeout s] [--seed n] [--out dir] [--no-ceiling]
//                      [--browser [chromium|firefox|webkit|webkit-flags,...]]
// --shapes takes shape names (bench/lib/shapes.mjs) and job names (bench/lib/jobs.mjs) alike.
import { fork } from 'node:child_process';
/** This process's Relaxed SIMD flag, for the children (their createMHA then picks the relaxed build). */
const RELAXED_FLAGS = process.execArgv.filter((flag) => flag.includes('wasm-relaxed-simd'));
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SHAPES, V1_SHAPES, shapeByName, describeShape, flopsOf } from './lib/shapes.mjs';
import { JOBS, JOB_NAMES, GROUPS } from './lib/jobs.mjs';
import { IMPL_NAMES, IMPLS, supports } from './impls/index.mjs';
import { DEFAULT_SEED } from '../scripts/lib/prng.mjs';
import { markdown, svg, speedups, statusText, IMPL_LABELS } from './lib/report.mjs';
import { environment, loadAverage } from './lib/env.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '..');

function parseArgs(argv) {
  const o = { quick: false, browser: false, ceiling: true, seed: DEFAULT_SEED, out: join(here, 'results') };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [key, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = () => inline ?? argv[++i];
    switch (key) {
      case '--shapes':
        o.names = value().split(',').filter(Boolean);
        break;
      case '--group':
        o.groups = value().split(',').filter(Boolean);
        break;
      case '--impls':
        o.impls = value().split(',').filter(Boolean);
        break;
      case '--quick':
        o.quick = true;
        break;
      case '--browser':
        // `--browser` alone is Chromium; `--browser firefox`, `--browser=webkit` pick another engine,
        // `--browser chromium,firefox,webkit` runs each row in each of them in turn.
        o.browser = true;
        if (inline !== undefined) o.engines = inline.split(',').filter(Boolean);
        else if (argv[i + 1] !== undefined && !argv[i + 1].startsWith('--'))
          o.engines = argv[++i].split(',').filter(Boolean);
        break;
      case '--no-ceiling':
        o.ceiling = false;
        break;
      case '--budget':
        o.budgetMs = Number(value());
        break;
      case '--rounds':
        o.rounds = Number(value());
        break;
      case '--timeout':
        o.timeoutS = Number(value());
        break;
      case '--seed':
        o.seed = Number(value());
        break;
      case '--out':
        o.out = resolve(value());
        break;
      case '--help':
      case '-h':
        console.log(
          readFileSync(fileURLToPath(import.meta.url), 'utf8')
            .split('\n')
            .slice(1, 9)
            .join('\n'),
        );
        process.exit(0);
        break;
      default:
        throw new Error(`unknown argument "${a}" (try --help)`);
    }
  }
  if (o.browser && !o.engines?.length) o.engines = ['chromium'];
  // What runs: the named shapes and jobs, else the groups' (v1: the v1 shapes, options: issue #13's shapes,
  // pairs and decode: the jobs of bench/lib/jobs.mjs), else everything (quick: four v1 shapes, no jobs).
  if (o.browser && (o.groups || o.names?.some((n) => JOB_NAMES.includes(n))))
    throw new Error('--browser runs shapes only (the jobs are Node rows)');
  for (const g of o.groups ?? [])
    if (!GROUPS.includes(g)) throw new Error(`--group: unknown group "${g}" (expected some of ${GROUPS.join(', ')})`);
  if (o.names) {
    for (const n of o.names) if (!JOB_NAMES.includes(n)) shapeByName(n); // validates names
    o.shapes = o.names.filter((n) => !JOB_NAMES.includes(n));
    o.jobs = o.names.filter((n) => JOB_NAMES.includes(n));
  } else if (o.groups) {
    o.shapes = SHAPES.map((s) => s.name).filter(
      (n) =>
        (o.groups.includes('v1') && V1_SHAPES.includes(n)) || (o.groups.includes('options') && !V1_SHAPES.includes(n)),
    );
    o.jobs = JOBS.filter((j) => o.groups.includes(j.group)).map((j) => j.name);
  } else {
    o.shapes = o.quick ? ['seed', 'bert', 'causal512', 'cross'] : SHAPES.map((s) => s.name);
    o.jobs = o.quick || o.browser ? [] : [...JOB_NAMES];
  }
  // Node rows that need Relaxed SIMD run only when this Node has it (--experimental-wasm-relaxed-simd,
  // passed on to the children).
  // Without that flag 'mha-wasm-fixed' is the build 'mha-wasm' loads (SIMD128): a second copy of its row.
  o.impls ??= o.browser
    ? ['mha-wasm', 'mha-wasm-fixed', 'ort-std', 'plain-js']
    : IMPL_NAMES.filter((name) => RELAXED_FLAGS.length > 0 || (!IMPLS[name].relaxedSimd && name !== 'mha-wasm-fixed'));
  for (const i of o.impls)
    if (!IMPL_NAMES.includes(i))
      throw new Error(`unknown implementation "${i}" (expected one of ${IMPL_NAMES.join(', ')})`);
  o.budgetMs ??= o.quick ? 1000 : 3000;
  o.rounds ??= o.quick ? 1 : 3;
  if (!Number.isInteger(o.rounds) || o.rounds < 1)
    throw new Error(`--rounds: expected a positive integer, got ${o.rounds}`);
  o.timeoutS ??= o.quick ? 120 : 300;
  return o;
}

/** Peak resident set of a live process, from /proc (Linux); 0 elsewhere. */
function vmHwm(pid) {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

function runChild(config, timeoutS) {
  return new Promise((resolveRun) => {
    const child = fork(join(here, 'child.mjs'), [JSON.stringify(config)], {
      execArgv: ['--max-old-space-size=16384', ...RELAXED_FLAGS],
      stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-4000);
    });
    let result = null;
    let phase = 'start';
    let peak = 0;
    let timedOut = false;
    const poll = setInterval(() => {
      peak = Math.max(peak, vmHwm(child.pid));
    }, 100);
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutS * 1000);
    child.on('message', (msg) => {
      if (msg.type === 'phase') {
        phase = msg.phase;
        peak = Math.max(peak, msg.rss ?? 0);
      } else if (msg.type === 'result') result = msg.result;
      else if (msg.type === 'error') {
        result = { status: 'error', error: msg.error, peakRssBytes: msg.peakRssBytes };
      }
    });
    child.on('exit', (code, signal) => {
      clearInterval(poll);
      clearTimeout(timer);
      const base = { impl: config.impl, ...(config.job ? { job: config.job } : { shape: config.shape }), phase };
      if (timedOut) {
        resolveRun({
          ...base,
          ...result,
          status: 'timeout',
          error: `no result within ${timeoutS} s (killed in phase "${phase}")`,
          peakRssBytes: peak,
          exitCode: code,
          signal,
        });
        return;
      }
      if (result && (result.status === 'ok' || result.status === 'wrong')) {
        resolveRun({ ...base, ...result, peakRssBytes: Math.max(peak, result.peakRssBytes ?? 0), exitCode: code });
        return;
      }
      if (result && result.status === 'error') {
        resolveRun({
          ...base,
          ...result,
          peakRssBytes: Math.max(peak, result.peakRssBytes ?? 0),
          exitCode: code,
          signal,
        });
        return;
      }
      const tail = stderr.trim().split('\n').filter(Boolean).slice(-3).join(' | ');
      resolveRun({
        ...base,
        status: 'crash',
        error: tail || `child died without a result`,
        exitCode: code,
        signal,
        peakRssBytes: peak,
      });
    });
  });
}

/** Shapes above this many FLOPs per call (long8k, whose slowest peers take minutes) are measured in one round. */
const ROUNDS_MAX_FLOPS = 2e10;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * One row from the rounds of an (implementation, shape) pair: the first round that did not succeed if
 * any (a wrong answer, crash or timeout is the row's result), else the pooled samples: median, min and
 * reps over all of them; first call, load time and the check from the first round; the largest peak RSS.
 */
function poolRounds(rounds) {
  if (rounds.length === 1) return rounds[0];
  const failed = rounds.find((r) => r.status !== 'ok');
  if (failed) return { ...failed, rounds: rounds.length };
  const samples = rounds.flatMap((r) => r.samplesMs);
  const medianMs = median(samples);
  return {
    ...rounds[0],
    samplesMs: samples,
    reps: samples.length,
    medianMs,
    minMs: Math.min(...samples),
    p90Ms: [...samples].sort((a, b) => a - b)[Math.round(0.9 * (samples.length - 1))],
    gflops: rounds[0].flops / (medianMs * 1e6),
    peakRssBytes: Math.max(...rounds.map((r) => r.peakRssBytes ?? 0)),
    rounds: rounds.length,
    roundMediansMs: rounds.map((r) => r.medianMs),
  };
}

/** Progress lines of a job: each contestant's median ms per call, then each ratio's median and range. */
function jobLines(r) {
  if (r.status !== 'ok') return [`${statusText(r)}: ${String(r.error).slice(0, 300)}`];
  if (r.rows)
    return [
      ...r.rows.map((x) => `${x.dtype.padEnd(10)} ${x.tokens} tokens (${x.bytesPerToken} bytes/token)`),
      `(${r.seconds.toFixed(0)} s)`,
    ];
  const lines = r.contestants.map(
    (c) =>
      `${c.name.padEnd(38)} ${fmtMs(c.medianMs).padStart(9)} ms  [${fmtMs(c.minMs)} – ${fmtMs(c.maxMs)}] over ${r.rounds} rounds`,
  );
  for (const f of r.failed) lines.push(`${f.name.padEnd(38)} FAILED: ${String(f.error).slice(0, 200)}`);
  for (const q of r.ratios)
    lines.push(
      `${q.a} ${q.speed ? 'speed' : 'time'} / ${q.b}: ${q.median.toFixed(2)}x [${q.min.toFixed(2)} – ${q.max.toFixed(2)}]  target ${q.target}`,
    );
  lines.push(`(${r.seconds.toFixed(0)} s)`);
  return lines;
}

const fmtMs = (x) => (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(3));

const LABEL_WIDTH = Math.max(...Object.values(IMPL_LABELS).map((label) => label.length));

function fmtRow(r) {
  const name = `${(IMPL_LABELS[r.impl] ?? r.impl).padEnd(LABEL_WIDTH)} ${r.shape.padEnd(10)}`;
  if (r.status !== 'ok') return `${name} ${statusText(r)}: ${String(r.error).slice(0, 160)}`;
  return `${name} ${fmtMs(r.medianMs).padStart(10)} ms  ${r.gflops.toFixed(2).padStart(6)} GFLOP/s  first ${fmtMs(r.firstCallMs)} ms  reps ${r.reps}${r.extrapolated ? '  (extrapolated)' : ''}`;
}

function writeOutputs(run, outDir, prefix) {
  mkdirSync(outDir, { recursive: true });
  speedups(run.results);
  const md = markdown(run);
  writeFileSync(join(outDir, `${prefix}.md`), md);
  writeFileSync(join(outDir, `${prefix}.json`), JSON.stringify(run, null, 1) + '\n');
  writeFileSync(join(outDir, `${prefix}.svg`), svg(run));
  return md;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.browser) {
    const { runBrowser, BROWSER_ENGINES } = await import('./browser/run-browser.mjs');
    for (const engine of opts.engines) {
      if (!BROWSER_ENGINES.includes(engine))
        throw new Error(`--browser: unknown engine "${engine}" (expected some of ${BROWSER_ENGINES.join(', ')})`);
    }
    const runs = await runBrowser({ ...opts, repoRoot, env: environment(repoRoot) });
    for (const run of runs) {
      // Chromium's files keep their name; the other engines get their own.
      const prefix = run.options.engine === 'chromium' ? 'browser-latest' : `browser-${run.options.engine}-latest`;
      const md = writeOutputs(run, opts.out, prefix);
      console.log('\n' + md);
      console.error(`wrote ${join(opts.out, `${prefix}.{md,json,svg}`)}`);
    }
    return;
  }
  const started = Date.now();
  const env = environment(repoRoot);
  const run = { mode: 'node', env, options: { ...opts, out: undefined }, ceiling: null, results: [], jobs: [] };
  console.error(
    `mha-wasm bench: ${opts.shapes.length} shapes × ${opts.impls.length} implementations, ${opts.jobs.length} interleaved jobs, budget ${opts.budgetMs} ms/row, timeout ${opts.timeoutS} s/row`,
  );
  // The ceiling is measured before and after the rows (the machine is shared); the best counts.
  const ceilings = [];
  const measureCeilingChild = async (when) => {
    const c = await runChild({ impl: 'ceiling' }, 60);
    ceilings.push({ when, ...c });
    console.error(
      `ceiling (${when}): ${c.gflops?.toFixed(1) ?? 'failed'} GFLOP/s (f32x4 mul+add on one core: ${c.form ?? '?'})` +
        (c.fma
          ? `, relaxed_madd ${c.fma.gflops.toFixed(1)} GFLOP/s (${c.fma.ratioFma.toFixed(2)}x)`
          : ', relaxed_madd: not enabled in this engine') +
        (c.bandwidth
          ? `, streaming read ${c.bandwidth.gbps.toFixed(1)} GB/s on 1 thread, ${c.bandwidthAllThreads?.gbps.toFixed(1)} GB/s on ${c.bandwidthAllThreads?.threads}`
          : ''),
    );
  };
  if (opts.ceiling) await measureCeilingChild('start');
  for (const name of opts.shapes) {
    const shape = shapeByName(name);
    // Rounds interleave the implementations (forward, then backward, ...), so a slow spell of the shared
    // machine falls on all of them rather than on whichever ran during it; each row pools its rounds'
    // samples. long8k, whose slowest rows take minutes, gets one round.
    const rounds = flopsOf(shape) > ROUNDS_MAX_FLOPS ? 1 : opts.rounds;
    const budgetMs = opts.budgetMs / rounds;
    console.error(
      `-- ${name} ${describeShape(shape)}: ${(flopsOf(shape) / 1e9).toFixed(3)} GFLOP per call` +
        (rounds > 1 ? `, ${rounds} rounds of ${budgetMs.toFixed(0)} ms per row` : ''),
    );
    // A peer without one of the shape's options gets a skipped row that says why, not another computation.
    const runnable = opts.impls.filter((impl) => {
      const ok = supports(impl, shape);
      if (ok !== true) run.results.push({ impl, shape: name, status: 'skipped', error: `${IMPLS[impl].label} ${ok}` });
      return ok === true;
    });
    const perImpl = new Map(runnable.map((impl) => [impl, []]));
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? runnable : [...runnable].reverse();
      for (const impl of order) {
        const r = await runChild({ impl, shape: name, seed: opts.seed, budgetMs, minReps: 3 }, opts.timeoutS);
        perImpl.get(impl).push(r);
        console.error(`   ${rounds > 1 ? `[${round + 1}/${rounds}] ` : ''}${fmtRow(r)}`);
      }
    }
    for (const impl of runnable) run.results.push(poolRounds(perImpl.get(impl)));
  }
  // Interleaved jobs (bench/lib/jobs.mjs): each one child, its contestants alternating round by round.
  for (const name of opts.jobs) {
    console.error(`-- job ${name}`);
    const t0 = Date.now();
    const r = await runChild({ impl: 'job', job: name, seed: opts.seed, budgetMs: opts.budgetMs }, opts.timeoutS);
    r.seconds = (Date.now() - t0) / 1000;
    run.jobs.push(r);
    console.error(
      jobLines(r)
        .map((line) => `   ${line}`)
        .join('\n'),
    );
  }
  if (opts.ceiling) {
    await measureCeilingChild('end');
    const ok = ceilings.filter((c) => c.status === 'ok');
    const best = ok.sort((a, b) => b.gflops - a.gflops)[0];
    const bestOf = (pick) =>
      ok
        .map(pick)
        .filter(Boolean)
        .sort((a, b) => (b.gflops ?? b.gbps) - (a.gflops ?? a.gbps))[0] ?? null;
    run.ceiling = best
      ? {
          ...best,
          fma: bestOf((c) => c.fma),
          bandwidth: bestOf((c) => c.bandwidth),
          bandwidthAllThreads: bestOf((c) => c.bandwidthAllThreads),
          runs: ceilings.map((c) => ({
            when: c.when,
            gflops: c.gflops,
            medianGflops: c.medianGflops,
            fmaGflops: c.fma?.gflops,
            gbps: c.bandwidth?.gbps,
            gbpsAllThreads: c.bandwidthAllThreads?.gbps,
          })),
        }
      : { gflops: undefined, error: ceilings.map((c) => c.error).join('; ') };
  }
  run.env.loadAverageEnd = loadAverage();
  run.totalSeconds = (Date.now() - started) / 1000;
  const md = writeOutputs(run, opts.out, 'latest');
  console.log('\n' + md);
  console.error(`wrote ${join(opts.out, 'latest.{md,json,svg}')} in ${run.totalSeconds.toFixed(0)} s`);
}

main().catch((error) => {
  console.error(error?.stack ?? error);
  process.exit(1);
});
