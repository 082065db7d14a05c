// Instantiating a compiled module through its Emscripten glue (mha.js, or the threaded glue with its
// worker pool), and checking that what started is this release's module: the exports the TS layer calls
// and the layout of the attention call struct.
import { readCallLayout } from '../call-abi.js';
import type { CallLayout } from '../call-abi.js';
import createMhaModule from '../mha.js';
import type { MhaModuleFactory, MhaModuleOptions, MhaWasmModule } from '../mha.js';
import { VERSION } from '../version.js';
import type { ThreadFiles } from './builds.js';
import { errorText, EXPECTED } from './source.js';
import type { WasmSource } from './source.js';
import {
  catchWorkerStartErrors,
  listenForWorkerStartErrors,
  THREADS_START_TIMEOUT_MS,
  ThreadsStartFailure,
  threadsGlue,
} from './threads.js';

/** Exports the glue and the TS layer need; a module without them is not this release's mha.wasm. */
const REQUIRED_API = [
  'version',
  'simd',
  '_mha_attention',
  '_mha_attention_weights',
  '_mha_split_heads',
  '_mha_merge_heads',
  'heapBytesInUse',
  'releaseScratch',
  'attentionCallLayout',
  'statusMessage',
  '_malloc',
  '_free',
] as const;

/** A started module and the layout of its attention call struct. */
export interface StartedModule {
  wasm: MhaWasmModule;
  callLayout: CallLayout;
}

/**
 * The Emscripten glue that starts the module and its options: the threaded build's scripts (`threads`),
 * the glue at `glueUrl`, or mha.js.
 */
async function moduleGlue(
  threads: ThreadFiles | undefined,
  workers: number,
  glueUrl: (() => URL) | undefined,
): Promise<{ factory: MhaModuleFactory; moduleOptions: MhaModuleOptions }> {
  let factory: MhaModuleFactory = createMhaModule;
  const moduleOptions: MhaModuleOptions = {};
  if (threads !== undefined) {
    const glue = await threadsGlue(threads);
    factory = glue.factory;
    // Emscripten preloads this many workers before the module is ready (at least 1; see CMakeLists.txt).
    moduleOptions.mhaWorkers = Math.max(1, workers);
    const workerFile = glue.workerFile;
    moduleOptions.locateFile = (file) => (file.endsWith('.worker.js') ? workerFile : file);
    moduleOptions.mainScriptUrlOrBlob = glue.glueFile;
  } else if (glueUrl !== undefined) {
    // An asset like the .wasm (bundlers emit it), imported by URL.
    const glue = (await import(/* webpackIgnore: true */ /* @vite-ignore */ glueUrl().href)) as {
      default: MhaModuleFactory;
    };
    factory = glue.default;
  }
  return { factory, moduleOptions };
}

/** The started module and its call layout, or the mismatch error when it lacks the API this script calls. */
function checkStarted(wasm: MhaWasmModule, mismatch: (detail: string) => Error): StartedModule {
  const missing = REQUIRED_API.filter(
    (name) => typeof (wasm as unknown as Record<string, unknown>)[name] !== 'function',
  );
  if (missing.length > 0) throw mismatch(`it lacks ${missing.join(', ')}`);
  const callLayout = readCallLayout(wasm);
  if (typeof callLayout === 'string') throw mismatch(callLayout);
  return { wasm, callLayout };
}

/**
 * Instantiates `wasmModule` (compiled from `source`). `threads`: the threaded build's scripts, whose glue
 * starts `workers` pthread workers before the module is ready; undefined for the single-threaded builds,
 * which run with mha.js, or with `glueUrl` (an ES module) for a build with its own glue. A threaded
 * start-up that fails or stalls rejects with a ThreadsStartFailure.
 */
export async function instantiate(
  source: WasmSource,
  wasmModule: WebAssembly.Module,
  threads: ThreadFiles | undefined,
  workers: number,
  glueUrl?: () => URL,
): Promise<StartedModule> {
  const threaded = threads !== undefined;
  const mismatch = (detail: string, cause?: unknown): Error =>
    new Error(
      `mha-wasm: ${source.label} does not match this script (mha-wasm ${VERSION}): ${detail}; ${EXPECTED}, ` +
        'from the same release as the script',
      cause === undefined ? undefined : { cause },
    );
  const exported = WebAssembly.Module.exports(wasmModule);
  if (!threaded && !exported.some((e) => e.kind === 'memory')) {
    const names = exported.map((e) => e.name).join(', ');
    throw mismatch(`it is a WebAssembly module without a memory export (exports: ${names || 'none'})`);
  }
  const { factory, moduleOptions } = await moduleGlue(threads, workers, glueUrl);
  const wasm = await new Promise<MhaWasmModule>((resolve, reject) => {
    const timer = threaded
      ? setTimeout(() => {
          moduleOptions.PThread?.terminateAllThreads();
          reject(
            new ThreadsStartFailure(
              `the threaded build's ${Math.max(1, workers)} worker(s) did not start within ` +
                `${THREADS_START_TIMEOUT_MS / 1000} s`,
            ),
          );
        }, THREADS_START_TIMEOUT_MS)
      : undefined;
    let settled = false;
    let started = false; // settled, and not by a failure
    const settle =
      <T>(fn: (value: T) => void) =>
      (value: T) => {
        settled = true;
        clearTimeout(timer);
        fn(value);
      };
    const resolveSettled = settle(resolve);
    resolve = (module) => {
      started = !settled;
      resolveSettled(module);
    };
    reject = settle(reject);
    // A worker that fails to load (a file a bundler left out, a broken script, a CSP refusing it) fires
    // an error event: fall back at once instead of after the timeout.
    const workerFailed = (text: string): void => {
      if (settled) return;
      moduleOptions.PThread?.terminateAllThreads();
      reject(new ThreadsStartFailure(`a worker of the threaded build failed to start (${text})`));
    };
    factory(
      Object.assign(moduleOptions, {
        instantiateWasm(
          imports: WebAssembly.Imports,
          done: (instance: WebAssembly.Instance, module: WebAssembly.Module) => void,
        ) {
          // Errors here (a LinkError, or the glue failing on missing exports inside done()) would
          // otherwise leave the glue's ready promise pending forever.
          WebAssembly.instantiate(wasmModule, imports)
            .then((instance) => {
              done(instance, wasmModule); // gives every pooled worker the glue's error handler
              if (threaded) catchWorkerStartErrors(moduleOptions.PThread, () => started, workerFailed);
            })
            .catch((error: unknown) => reject(mismatch(errorText(error), error)));
          return {};
        },
      }),
    ).then(resolve, (error: unknown) => reject(mismatch(errorText(error), error)));
    if (threaded) listenForWorkerStartErrors(moduleOptions.PThread, () => started, workerFailed);
  });
  return checkStarted(wasm, mismatch);
}
