// createMHA: checks its options, selects a build (loader/builds.ts), compiles (memoized) and instantiates
// it, starts its threads or falls back to one, and warms the kernel up. Also the package's `version`.
import { describe } from './describe.js';
import { WasmMHA } from './instance.js';
import {
  BUILDS,
  buildOfModule,
  coreCount,
  defaultSource,
  MAX_AUTO_THREADS,
  MAX_THREADS,
  selectBuild,
  threadsUnavailable,
  warnSingleThreaded,
} from './loader/builds.js';
import type { SimdChoice } from './loader/builds.js';
import { compiledBuild } from './loader/compile.js';
import { isNode } from './loader/env.js';
import { instantiate } from './loader/instantiate.js';
import type { StartedModule } from './loader/instantiate.js';
import { checkWasmVersion, sourceFromOptions } from './loader/source.js';
import { ThreadsStartFailure } from './loader/threads.js';
import type { CreateOptions, MHA } from './types.js';
import { CREATE_KEYS, checkOptionsObject } from './validate.js';
import { VERSION } from './version.js';
import { warmedModules, warmUp } from './warmup.js';

/**
 * Loads the WebAssembly module and returns a ready instance. By default the `.wasm` file is located
 * next to this script (`new URL('./mha.wasm', import.meta.url)`, which Vite and webpack rewrite), read
 * from disk in Node and fetched in browsers; `wasmUrl` or `wasmBinary` override that. Compilation is
 * memoized per source; each call returns a new, independent instance.
 *
 * @param options - `{ threads, wasmUrl, wasmBinary }`; see {@link CreateOptions}
 * @returns a promise of an {@link MHA} instance
 * @throws TypeError / RangeError for bad options (both wasmUrl and wasmBinary given, wrong types)
 * @throws Error when the wasm cannot be read (HTTP error, missing file), is not WebAssembly (e.g. an
 *   HTML page), is not this package's module, or reports another version than this script; the message
 *   names what was fetched and what was expected
 * @example
 * ```ts
 * import { createMHA } from 'mha-wasm';
 * const mha = await createMHA();
 * const out = mha.multiHeadAttention(q, k, v, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
 * ```
 */
export async function createMHA(options: CreateOptions = {}): Promise<MHA> {
  const o = checkOptionsObject('createMHA: options', options, CREATE_KEYS);
  if (o.threads !== undefined && o.threads !== 'auto') {
    if (typeof o.threads !== 'number') {
      throw new TypeError(`createMHA: threads: expected a positive integer or 'auto', got ${describe(o.threads)}`);
    }
    if (!Number.isInteger(o.threads) || o.threads < 1 || o.threads > MAX_THREADS) {
      throw new RangeError(
        `createMHA: threads: expected a positive integer up to ${MAX_THREADS} or 'auto', got ${o.threads}`,
      );
    }
  }
  if (o.warmup !== undefined && typeof o.warmup !== 'boolean') {
    throw new TypeError(`createMHA: warmup: expected a boolean, got ${describe(o.warmup)}`);
  }
  if (o.simd !== undefined && o.simd !== 'auto' && o.simd !== 'fixed' && o.simd !== false) {
    const message = `createMHA: simd: expected 'auto', 'fixed' or false, got ${describe(o.simd)}`;
    throw typeof o.simd === 'string' || typeof o.simd === 'boolean' ? new RangeError(message) : new TypeError(message);
  }
  const requested =
    o.threads === 'auto' ? Math.min(MAX_AUTO_THREADS, await coreCount()) : ((o.threads as number | undefined) ?? 1);
  const simdWanted = (o.simd ?? 'auto') as SimdChoice;
  const custom = o.wasmUrl !== undefined || o.wasmBinary !== undefined;

  // Which build: the best one the options allow and the engine can run, threaded when more than one thread
  // is asked for and the environment can run it. Otherwise single-threaded, with a warning naming the reason.
  let { build, reason } = selectBuild(requested, simdWanted);
  const source = custom ? sourceFromOptions(o) : defaultSource(build);
  const compiled = await compiledBuild(source);
  const wasmModule = compiled.wasmModule;
  let threaded = compiled.threaded;
  // The glue that runs this module: a custom file's own kind decides (the relaxed builds have their own).
  const spec = BUILDS[custom ? buildOfModule(threaded, true, compiled.relaxed) : build];
  if (custom) {
    // The given file decides the build.
    if (threaded) {
      const why = threadsUnavailable();
      if (why !== undefined)
        throw new Error(`mha-wasm: ${source.label} is the threaded build, which cannot run here: ${why}`);
      reason = undefined;
    } else if (requested > 1 && reason === undefined) {
      reason = `${source.label} is a single-threaded build (pass mha-threads.wasm for threads)`;
    }
  }
  let started: StartedModule;
  let usedModule = wasmModule;
  try {
    started = await instantiate(source, wasmModule, threaded ? spec.threads : undefined, requested - 1, spec.glueUrl);
  } catch (error) {
    // Never hang on a threaded start-up that stalls: the best single-threaded build still works.
    if (!(error instanceof ThreadsStartFailure) || custom) throw error;
    reason = error.message;
    build = selectBuild(1, simdWanted).build;
    const fallback = defaultSource(build);
    usedModule = (await compiledBuild(fallback)).wasmModule;
    started = await instantiate(fallback, usedModule, undefined, 0, BUILDS[build].glueUrl);
    threaded = false;
  }
  const { wasm, callLayout } = started;
  checkWasmVersion(source.label, wasm.version());
  if (custom) build = buildOfModule(threaded, wasm.simd(), compiled.relaxed);

  let threads = 1;
  if (threaded) {
    threads = wasm._mha_set_threads(Math.max(1, requested));
    if (threads < requested) reason = `only ${threads} of ${requested} threads could be started`;
    // Node: the workers alone do not keep the process alive (calls are synchronous, so nothing waits on
    // them between calls); a script that forgets dispose() still exits.
    if (isNode()) {
      for (const worker of [...(wasm.PThread?.unusedWorkers ?? []), ...(wasm.PThread?.runningWorkers ?? [])]) {
        worker.unref?.();
      }
    }
  }
  if (reason !== undefined && requested > 1) warnSingleThreaded(requested, reason);
  const instance = new WasmMHA(wasm, callLayout, build, threads);
  // Instances of one compiled module share its code, tiered-up functions included: warm each module once.
  if (o.warmup !== false && !warmedModules.has(usedModule) && (await warmUp(instance))) warmedModules.add(usedModule);
  return instance;
}

/** The package version of this script. */
export const version: string = VERSION;
