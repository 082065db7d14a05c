// Child process: runs one (implementation, shape) measurement, or one interleaved job, and reports it to
// the parent over IPC.
// A crash, OOM or timeout here costs only this row.
import { IMPLS } from './impls/index.mjs';
import { shapeByName } from './lib/shapes.mjs';
import { measure } from './lib/measure.mjs';
import { measureCeilings } from './lib/ceiling.mjs';
import { measureBandwidthThreads } from './lib/bandwidth-threads.mjs';

const config = JSON.parse(process.argv[2]);
const send = (msg) =>
  new Promise((resolve) =>
    process.send ? process.send(msg, () => resolve()) : (console.log(JSON.stringify(msg)), resolve()),
  );
const maxRss = () => process.resourceUsage().maxRSS * 1024;

async function main() {
  if (config.impl === 'ceiling') {
    const r = await measureCeilings();
    // All cores reading at once: the bandwidth a multi-threaded decode step can get.
    r.bandwidthAllThreads = await measureBandwidthThreads({ threads: config.threads ?? 2 });
    await send({ type: 'result', result: { impl: 'ceiling', status: 'ok', ...r, peakRssBytes: maxRss() } });
    return;
  }
  if (config.impl === 'job') {
    // An interleaved job (bench/lib/jobs.mjs): all its contestants in this one process.
    const { runJob } = await import('./lib/jobs-run.mjs');
    const r = await runJob({
      job: config.job,
      seed: config.seed,
      budgetMs: config.budgetMs,
      onPhase: (phase) => send({ type: 'phase', phase, rss: maxRss() }),
    });
    await send({ type: 'result', result: { impl: 'job', ...r, peakRssBytes: maxRss() } });
    return;
  }
  const entry = IMPLS[config.impl];
  if (!entry) throw new Error(`unknown implementation "${config.impl}"`);
  const shape = shapeByName(config.shape);
  const result = await measure({
    impl: config.impl,
    load: entry.load,
    shape,
    seed: config.seed,
    budgetMs: config.budgetMs,
    minReps: config.minReps,
    ...(entry.singleCallOverMs ? { singleCallMs: entry.singleCallOverMs } : {}),
    onPhase: (phase) => send({ type: 'phase', phase, rss: maxRss() }),
  });
  result.peakRssBytes = maxRss();
  await send({ type: 'result', result });
}

main().then(
  () => process.exit(0),
  async (error) => {
    await send({
      type: 'error',
      error: String(error?.stack ?? error)
        .split('\n')
        .slice(0, 4)
        .join(' | '),
      peakRssBytes: maxRss(),
    });
    process.exit(1);
  },
);
