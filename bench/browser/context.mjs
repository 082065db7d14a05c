#!/usr/bin/env node
// The context-llama-1b job (bench/lib/jobs-context.mjs) in a browser page: how many tokens of a
// Llama-3.2-1B-shaped cache one instance holds per cache dtype, found, filled and stepped through the
// public API as in Node, with the page's own wasm memory limit (a tab, not Node, is where most users run).
//
//   node bench/browser/context.mjs [--engine chromium] [--out bench/results/long-contexts-context]
//
// Writes <out>/<engine>.json (the rows) and <out>/<engine>.md (the same table as the Node report).
import fs from 'node:fs';
import path from 'node:path';
import { option, withBenchPage } from './bench-page.mjs';
import { contextSection } from '../lib/report-jobs.mjs';
import { loadAverage } from '../lib/env.mjs';

const args = process.argv.slice(2);
const engine = option(args, '--engine', 'chromium');
const out = option(args, '--out', 'bench/results/long-contexts-context');

const loadAtStart = loadAverage();
const started = Date.now();
const { browser, rows } = await withBenchPage(
  async (page, version) => {
    const found = await page.evaluate(async () => {
      const { contextRows } = await import('/bench/lib/jobs-context.mjs');
      return contextRows({ onPhase: () => {} });
    });
    return { browser: version, rows: found };
  },
  { engine },
);
const run = {
  engine,
  browser,
  date: new Date(started).toISOString(),
  seconds: Math.round((Date.now() - started) / 1000),
  load: { start: loadAtStart, end: loadAverage() },
  rows,
};
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, `${engine}.json`), `${JSON.stringify(run, null, 2)}\n`);
const text = [
  `# mha-wasm: longest context in one instance (${browser})`,
  '',
  `${run.date} · ${run.seconds} s · load average at start ${loadAtStart.join(' / ')}, at end ${run.load.end.join(' / ')}`,
  '',
  ...contextSection({ rows }),
];
fs.writeFileSync(path.join(out, `${engine}.md`), `${text.join('\n')}`);
console.log(text.join('\n'));
