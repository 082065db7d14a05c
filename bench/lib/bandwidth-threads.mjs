// Node only: the streaming-read bandwidth of N threads together. One shared memory is split into N
// slices; each worker_thread streams over its own slice with the module of bandwidth.mjs. The workers
// start each pass together (an Atomics barrier), and the pass time is the slowest worker's, so the
// figure is what N threads reading at once really get.
import { Worker, isMainThread, workerData, parentPort } from 'node:worker_threads';
import { bandwidthReader, touchedMemory, DEFAULT_BUFFER_BYTES, BYTES_PER_ITERATION } from './bandwidth.mjs';

const PAGE = 65536;

/**
 * Streaming-read bandwidth of `threads` workers over one buffer of `bytes`, in GB/s: best and median of
 * `trials` passes. Resolves when every worker has ended.
 */
export async function measureBandwidthThreads({ threads = 2, bytes = DEFAULT_BUFFER_BYTES, trials = 9 } = {}) {
  const { memory, pages } = touchedMemory(bytes, { shared: true });
  const total = pages * PAGE;
  const slice = Math.floor(total / threads / BYTES_PER_ITERATION) * BYTES_PER_ITERATION;
  // control[0]: pass number the workers may start; control[1 + w]: passes worker w has finished.
  const control = new Int32Array(new SharedArrayBuffer(4 * (threads + 1)));
  const workers = Array.from(
    { length: threads },
    (_, w) =>
      new Worker(new URL(import.meta.url), {
        workerData: { memory, pages, begin: w * slice, end: (w + 1) * slice, control, index: w, passes: trials + 1 },
      }),
  );
  const ended = workers.map(
    (worker) =>
      new Promise((resolve, reject) => {
        worker.once('error', reject);
        worker.once('exit', resolve);
      }),
  );
  await Promise.all(workers.map((worker) => new Promise((resolve) => worker.once('message', resolve)))); // compiled
  const samples = [];
  for (let pass = 1; pass <= trials + 1; pass++) {
    const t0 = performance.now();
    Atomics.store(control, 0, pass);
    Atomics.notify(control, 0);
    for (let w = 0; w < threads; w++)
      while (Atomics.load(control, 1 + w) < pass) Atomics.wait(control, 1 + w, pass - 1, 1000);
    const ms = performance.now() - t0;
    if (pass > 1) samples.push((slice * threads) / (ms * 1e6)); // pass 1 warms up
  }
  await Promise.all(ended);
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    gbps: sorted[sorted.length - 1],
    medianGbps: sorted[sorted.length >> 1],
    samples,
    bufferBytes: slice * threads,
    threads,
  };
}

if (!isMainThread && workerData?.control) {
  const { memory, pages, begin, end, control, index, passes } = workerData;
  const run = bandwidthReader(memory, pages, { shared: true });
  run(begin, Math.min(end, begin + 64 * BYTES_PER_ITERATION)); // compile and tier up before the first pass
  parentPort.postMessage('ready');
  let sink = 0;
  for (let pass = 1; pass <= passes; pass++) {
    while (Atomics.load(control, 0) < pass) Atomics.wait(control, 0, pass - 1, 1000);
    sink += run(begin, end);
    Atomics.store(control, 1 + index, pass);
    Atomics.notify(control, 1 + index);
  }
  if (sink === 0.5) console.log(sink); // never true (an integer): keeps the passes observable
}
