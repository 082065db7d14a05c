// The builds of the wasm module, in one table keyed by build name: the files of each, the engine features
// it needs and how they are detected. createMHA selects a build from it; adding a build (e.g. relaxed
// SIMD) is one row here plus its files (and its name in the public BuildName type).
import type { BuildName } from '../types.js';
import { importNodeBuiltin, isNode } from './env.js';
import type { WasmSource } from './source.js';

/** An engine feature that some build needs. */
type Feature = 'simd128' | 'relaxed-simd' | 'threads';

/** The scripts of a threaded build: its glue (an ES module for browsers, CommonJS for Node) and pthread worker. */
export interface ThreadFiles {
  glueUrl(): URL;
  workerUrl(): URL;
  /** File names next to this script, loaded by Node's require (see loader/threads.ts). */
  nodeGlue: string;
  nodeWorker: string;
}

export interface BuildSpec {
  /**
   * The build's .wasm next to this script. Keep each expression literal: Vite, webpack 5 and Parcel
   * recognize `new URL('<file>', import.meta.url)` and emit the file as an asset with a rewritten URL. The
   * path is relative to dist/index.js, the one file that web/bundle.mjs builds all of web/src into.
   */
  wasmUrl(): URL;
  /** What the engine must have, in the order the features are checked. */
  needs: readonly Feature[];
  /** A threaded build's scripts; without them the build runs on the calling thread, with the glue mha.js. */
  threads?: ThreadFiles;
  /** A single-threaded build's own glue (an ES module), when it cannot run with mha.js. */
  glueUrl?: () => URL;
}

/** Every build, best first: createMHA takes the first row that the options allow and the engine can run. */
export const BUILDS: Readonly<Record<BuildName, BuildSpec>> = {
  // The Relaxed SIMD twins of the next two rows (f32x4.relaxed_madd: FMA where the engine has it). Linked
  // without binaryen, their wasm keeps unminified import names, so they have their own glue; the threaded
  // one shares the pthread worker scripts, which load whichever glue the loader names.
  'relaxed-simd-threads': {
    wasmUrl: () => new URL('./mha-relaxed-threads.wasm', import.meta.url),
    needs: ['simd128', 'relaxed-simd', 'threads'],
    threads: {
      glueUrl: () => new URL('./mha-relaxed-threads.js', import.meta.url),
      workerUrl: () => new URL('./mha-threads.worker.js', import.meta.url),
      nodeGlue: 'mha-relaxed-threads.node.cjs',
      nodeWorker: 'mha-threads.node.worker.cjs',
    },
  },
  'simd-threads': {
    wasmUrl: () => new URL('./mha-threads.wasm', import.meta.url),
    needs: ['simd128', 'threads'],
    threads: {
      glueUrl: () => new URL('./mha-threads.js', import.meta.url),
      workerUrl: () => new URL('./mha-threads.worker.js', import.meta.url),
      nodeGlue: 'mha-threads.node.cjs',
      nodeWorker: 'mha-threads.node.worker.cjs',
    },
  },
  'relaxed-simd': {
    wasmUrl: () => new URL('./mha-relaxed.wasm', import.meta.url),
    needs: ['simd128', 'relaxed-simd'],
    glueUrl: () => new URL('./mha-relaxed.js', import.meta.url),
  },
  simd: { wasmUrl: () => new URL('./mha.wasm', import.meta.url), needs: ['simd128'] },
  baseline: { wasmUrl: () => new URL('./mha-baseline.wasm', import.meta.url), needs: [] },
};

/** A module with one function using a v128 op (i8x16.splat + i8x16.popcnt): valid only with SIMD128. */
const SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11,
]);
/** A module with one function doing f32x4.relaxed_madd on its v128 parameter: valid only with Relaxed SIMD. */
const RELAXED_SIMD_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 1, 123, 0, 3, 2, 1, 0, 10, 14, 1, 12, 0, 32, 0, 32, 0, 32, 0, 253, 133, 2,
  26, 11,
]);
/** A module with a shared memory and an atomic load: valid only with WebAssembly threads. */
const THREADS_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 5, 4, 1, 3, 1, 1, 10, 11, 1, 9, 0, 65, 0, 254, 16, 2, 0,
  26, 11,
]);

function validates(bytes: Uint8Array): boolean {
  try {
    return WebAssembly.validate(bytes as Uint8Array<ArrayBuffer>);
  } catch {
    return false;
  }
}

/** Why the threaded build cannot run here, or undefined when it can. */
export function threadsUnavailable(): string | undefined {
  const g = globalThis as { crossOriginIsolated?: boolean; SharedArrayBuffer?: unknown; Worker?: unknown };
  if (!isNode() && g.crossOriginIsolated === false) {
    return (
      'the page is not cross-origin isolated (crossOriginIsolated is false): serve it with the headers ' +
      'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp (missing COOP/COEP ' +
      'headers)'
    );
  }
  if (typeof g.SharedArrayBuffer !== 'function') return 'SharedArrayBuffer is not available in this environment';
  if (!isNode() && typeof g.Worker !== 'function') return 'Web Workers are not available in this environment';
  if (!validates(THREADS_PROBE)) return 'this engine does not support WebAssembly threads (shared memory and atomics)';
  return undefined;
}

/** How each feature is detected: undefined when the environment has it, else why not. */
const FEATURES: Readonly<Record<Feature, () => string | undefined>> = {
  simd128: () => (validates(SIMD_PROBE) ? undefined : 'this engine lacks WebAssembly SIMD128'),
  'relaxed-simd': () => (validates(RELAXED_SIMD_PROBE) ? undefined : 'this engine lacks WebAssembly Relaxed SIMD'),
  threads: threadsUnavailable,
};

/**
 * The custom section that names the engine features a module needs beyond SIMD128 (src/mha/kernels/kernel_relaxed.cpp).
 */
const FEATURES_SECTION = 'mha_wasm_features';

/** Reads an unsigned LEB128 at `at`; undefined past the end. */
function readLeb(bytes: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  for (let shift = 0; at < bytes.length && shift < 35; shift += 7) {
    const byte = bytes[at++]!;
    value += (byte & 0x7f) * 2 ** shift;
    if ((byte & 0x80) === 0) return { value, next: at };
  }
  return undefined;
}

/**
 * The features that wasm bytes say they need (the mha_wasm_features custom section), read without
 * compiling: a module using Relaxed SIMD does not compile at all where it is missing.
 */
export function declaredFeatures(bytes: Uint8Array): Feature[] {
  const found: Feature[] = [];
  for (let at = 8; at < bytes.length;) {
    const id = bytes[at]!;
    const size = readLeb(bytes, at + 1);
    if (size === undefined) break;
    const end = size.next + size.value;
    if (id === 0) {
      const name = readLeb(bytes, size.next);
      if (name === undefined || name.next + name.value > end) break;
      if (new TextDecoder().decode(bytes.subarray(name.next, name.next + name.value)) === FEATURES_SECTION) {
        const text = new TextDecoder().decode(bytes.subarray(name.next + name.value, end));
        for (const feature of text.split(/\s+/)) if (feature === 'relaxed-simd') found.push(feature);
      }
    }
    at = end;
  }
  return found;
}

/** True when a compiled module carries the Relaxed SIMD kernel (its mha_wasm_features section says so). */
export function needsRelaxedSimd(wasmModule: WebAssembly.Module): boolean {
  return WebAssembly.Module.customSections(wasmModule, FEATURES_SECTION).some((section) =>
    new TextDecoder().decode(section).split(/\s+/).includes('relaxed-simd'),
  );
}

/** Why this engine cannot compile a module that declares `features`, or undefined when it can. */
export function declaredFeatureMissing(features: readonly Feature[]): string | undefined {
  for (const feature of features) {
    const why = FEATURES[feature]();
    if (why !== undefined) return why;
  }
  return undefined;
}

/** The first feature of `spec` that this environment lacks, and why; undefined when it can run the build. */
function missingFeature(spec: BuildSpec): { feature: Feature; why: string } | undefined {
  for (const feature of spec.needs) {
    const why = FEATURES[feature]();
    if (why !== undefined) return { feature, why };
  }
  return undefined;
}

/** createMHA's `simd` option: every build, no Relaxed SIMD ('fixed'), or no SIMD at all (false). */
export type SimdChoice = 'auto' | 'fixed' | false;

/**
 * Which build to load for `requested` threads: the first threaded row that can run when more than one
 * thread is asked for, else the first single-threaded row. `simd: 'fixed'` allows only rows without
 * Relaxed SIMD, `false` only rows that need no SIMD. `reason` says why threads were asked for but a
 * single-threaded build was chosen.
 */
export function selectBuild(requested: number, simd: SimdChoice): { build: BuildName; reason: string | undefined } {
  const allowed = (name: BuildName): boolean => {
    const needs = BUILDS[name].needs;
    return simd === 'auto' || (simd === 'fixed' ? !needs.includes('relaxed-simd') : !needs.includes('simd128'));
  };
  const rows = (Object.keys(BUILDS) as BuildName[]).filter(allowed);
  let reason: string | undefined;
  if (requested > 1) {
    const threaded = rows.filter((name) => BUILDS[name].threads !== undefined);
    if (threaded.length === 0) reason = 'simd: false selects the baseline build, which is single-threaded';
    for (const name of threaded) {
      const missing = missingFeature(BUILDS[name]);
      if (missing === undefined) return { build: name, reason: undefined };
      reason = missing.feature === 'threads' ? missing.why : `${missing.why}, which the threaded build needs`;
    }
  }
  const single = rows.find((name) => BUILDS[name].threads === undefined && missingFeature(BUILDS[name]) === undefined);
  return { build: single ?? 'baseline', reason };
}

/** The build that a module given by the caller (wasmUrl, wasmBinary) is, from what it reports. */
export function buildOfModule(threaded: boolean, simd: boolean, relaxed: boolean): BuildName {
  if (relaxed) return threaded ? 'relaxed-simd-threads' : 'relaxed-simd';
  return threaded ? 'simd-threads' : simd ? 'simd' : 'baseline';
}

/** The selected build's file next to this script. */
export function defaultSource(build: BuildName): WasmSource {
  const url = BUILDS[build].wasmUrl();
  return { kind: 'url', url, label: url.href };
}

/** Largest explicit thread count, and the cap of `threads: 'auto'`. */
export const MAX_THREADS = 64;
export const MAX_AUTO_THREADS = 8;

/** Cores of this machine, for `threads: 'auto'`. */
export async function coreCount(): Promise<number> {
  const nav = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator;
  if (isNode()) {
    try {
      const os = await importNodeBuiltin<{ availableParallelism?: () => number; cpus(): unknown[] }>('node:os');
      return os.availableParallelism?.() ?? os.cpus().length;
    } catch {
      // fall through to navigator (Node 21+ has it too)
    }
  }
  const n = nav?.hardwareConcurrency;
  return typeof n === 'number' && n >= 1 ? Math.floor(n) : 1;
}

const warned = new Set<string>();

/** Says once per reason (per page or process) that threads were asked for and why they are not used. */
export function warnSingleThreaded(requested: number, reason: string): void {
  if (warned.has(reason)) return;
  warned.add(reason);
  console.warn(`mha-wasm: ${requested} threads requested, running single-threaded: ${reason}`);
}
