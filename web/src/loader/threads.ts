// The threaded build's start-up: locating its glue and pthread worker script (Node, browsers, bundlers),
// and turning a start-up that fails or stalls into a ThreadsStartFailure, which createMHA answers by
// falling back to one thread.
import type { MhaModuleFactory, MhaModuleOptions } from '../mha.js';
import type { ThreadFiles } from './builds.js';
import { importNodeBuiltin, isNode } from './env.js';

/** Raised when the threaded build's workers fail or do not all start in time; createMHA then falls back. */
export class ThreadsStartFailure extends Error {}

/**
 * How long the threaded build may take to start its workers. Each must load the glue and compile the
 * module; that takes well under a second here, but a worker that fails to load would leave
 * Emscripten's start-up promise pending forever, so a bound turns a hang into a fallback.
 */
export const THREADS_START_TIMEOUT_MS = 20000;

/**
 * The threaded glue: an ES module in browsers, CommonJS in Node (see CMakeLists.txt), with where its
 * pthread worker script and the glue itself (which each worker loads) are.
 */
export async function threadsGlue(
  files: ThreadFiles,
): Promise<{ factory: MhaModuleFactory; workerFile: string; glueFile: string }> {
  if (isNode()) {
    const { createRequire } = await importNodeBuiltin<{ createRequire(from: string | URL): (id: string) => unknown }>(
      'node:module',
    );
    const { fileURLToPath } = await importNodeBuiltin<{ fileURLToPath(url: string | URL): string }>('node:url');
    // Computed names and a base in a variable: bundlers must not try to follow these.
    const here = import.meta.url;
    const glue = ['.', files.nodeGlue].join('/');
    const worker = ['.', files.nodeWorker].join('/');
    const factory = createRequire(here)(glue) as MhaModuleFactory;
    return {
      factory,
      workerFile: fileURLToPath(new URL(worker, here)),
      glueFile: fileURLToPath(new URL(glue, here)),
    };
  }
  // Both files are assets (bundlers copy them, as they do the .wasm): the glue is imported by URL here and
  // by every worker, so it is one module, not a bundled chunk plus a copy.
  const glueUrl = files.glueUrl();
  const workerUrl = files.workerUrl();
  const glue = (await import(/* webpackIgnore: true */ /* @vite-ignore */ glueUrl.href)) as {
    default: MhaModuleFactory;
  };
  return { factory: glue.default, workerFile: await workerScriptUrl(workerUrl), glueFile: glueUrl.href };
}

const workerScriptUrls = new Map<string, Promise<string>>();

/**
 * The URL the pthread workers start from. The worker is a classic script that import()s the glue by URL,
 * and two bundler behaviours break the plain asset URL (both found by tests/consumers/vite-dev.test.mjs):
 * - `vite build` inlines assets under build.assetsInlineLimit (4 KiB; the worker is ~3 KB) as a data: URL.
 *   A worker started from a data: URL has an opaque origin, so its import() of the glue fails (CORS). A
 *   blob: URL of the same script has the page's origin (one per data: URL, kept: the pool may grow later).
 * - Vite's dev server runs every .js it serves through its import analysis, which rewrites the worker's
 *   import(url) and prepends an `import` statement: a SyntaxError in a classic worker. With Vite's
 *   classic-worker marker in the query (`worker_file&type=classic`, what Vite itself appends to
 *   `new Worker(new URL(...))` in dev) it inlines that helper instead. Other servers ignore the query.
 */
function workerScriptUrl(url: URL): Promise<string> {
  if (url.protocol === 'data:') {
    let blobUrl = workerScriptUrls.get(url.href);
    if (!blobUrl) {
      blobUrl = fetch(url)
        .then((response) => response.blob())
        .then((blob) => URL.createObjectURL(new Blob([blob], { type: 'text/javascript' })));
      workerScriptUrls.set(url.href, blobUrl);
    }
    return blobUrl;
  }
  if (url.protocol === 'http:' || url.protocol === 'https:') {
    const marked = new URL(url);
    // Set as a string: URLSearchParams would write worker_file=, which Vite does not recognize.
    marked.search = `${url.search ? `${url.search}&` : '?'}worker_file&type=classic`;
    return Promise.resolve(marked.href);
  }
  return Promise.resolve(url.href);
}

type PThreadPool = MhaModuleOptions['PThread'];

function pooledWorkers(pthread: PThreadPool) {
  return [...(pthread?.unusedWorkers ?? []), ...(pthread?.runningWorkers ?? [])];
}

/** The text of a worker's error event: an ErrorEvent's place and message, or what a bare Event means. */
function workerErrorText(event: unknown): string {
  const e = (event ?? {}) as { filename?: unknown; lineno?: unknown; message?: unknown };
  const place =
    typeof e.filename === 'string' && e.filename !== ''
      ? `${e.filename}${typeof e.lineno === 'number' ? `:${e.lineno}` : ''}: `
      : '';
  // Firefox and WebKit give a script that fails to load a plain Event, without file, line or message.
  const message =
    typeof e.message === 'string' && e.message !== ''
      ? e.message
      : 'an error event without a message (the worker script failed to load or to run)';
  return `worker sent an error! ${place}${message}`;
}

/**
 * Listens for the pooled workers' error events from the moment they exist. The glue creates its pool
 * synchronously inside the factory call, so a listener added right after that call is in place before
 * any event can be dispatched (WebKit fires a broken script's error a few ms after `new Worker`, long
 * before the glue's own handlers are set after instantiation). Until the pool has started, an error
 * reports to `failed` (which falls back to one thread on the first report and ignores the rest, e.g.
 * the same error seen again by catchWorkerStartErrors).
 */
export function listenForWorkerStartErrors(
  pthread: PThreadPool,
  hasStarted: () => boolean,
  failed: (text: string) => void,
): void {
  for (const worker of pooledWorkers(pthread)) {
    worker.addEventListener?.('error', (event: unknown) => {
      if (!hasStarted()) failed(workerErrorText(event));
    });
  }
}

/**
 * Emscripten 3.1.6's handler of a worker's error event logs it and then rethrows the event: an uncaught
 * exception, which in Node ends the process (a worker file missing from a bundle was enough). Until the
 * pool has started, each worker's handler reports to `failed` instead (Node's workers are EventEmitters:
 * their errors arrive only here, through the glue's forwarding to onerror); once the module has started,
 * the glue's own handler runs again.
 */
export function catchWorkerStartErrors(
  pthread: PThreadPool,
  hasStarted: () => boolean,
  failed: (text: string) => void,
): void {
  for (const worker of pooledWorkers(pthread)) {
    const glueHandler = worker.onerror;
    worker.onerror = (event: unknown) => {
      if (hasStarted()) glueHandler?.call(worker, event);
      else failed(workerErrorText(event));
    };
  }
}
