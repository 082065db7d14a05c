// Compiling the wasm, memoized: a WebAssembly.Module is fetched and compiled once per source (the default
// URL of each build, each custom wasmUrl, each wasmBinary object); every createMHA() call instantiates it
// afresh, so instances share no state. A failed load is forgotten, so a later call retries.
import { declaredFeatureMissing, declaredFeatures, needsRelaxedSimd } from './builds.js';
import { checkMagic, errorText, EXPECTED, readWasmBytes } from './source.js';
import type { WasmSource } from './source.js';

const compiledByKey = new Map<string, Promise<WebAssembly.Module>>();
const compiledByBinary = new WeakMap<object, Promise<WebAssembly.Module>>();

async function compileModule(source: WasmSource): Promise<WebAssembly.Module> {
  const { bytes, contentType } = await readWasmBytes(source);
  checkMagic(source.label, bytes, contentType);
  // A relaxed-SIMD module does not compile at all where the engine lacks the feature: say so, by name.
  const missing = declaredFeatureMissing(declaredFeatures(bytes));
  if (missing !== undefined) {
    throw new Error(
      `mha-wasm: ${source.label} is a Relaxed SIMD build (mha-relaxed.wasm or mha-relaxed-threads.wasm) ` +
        `and ${missing} ` +
        '(Chrome 114+, Firefox 145+; Node needs --experimental-wasm-relaxed-simd): load mha.wasm or mha-threads.wasm ' +
        'instead, or leave out wasmUrl/wasmBinary and createMHA picks the best build this engine runs',
    );
  }
  try {
    return await WebAssembly.compile(bytes as Uint8Array<ArrayBuffer>);
  } catch (error) {
    throw new Error(`mha-wasm: ${source.label} does not compile as WebAssembly (${errorText(error)}); ${EXPECTED}`, {
      cause: error,
    });
  }
}

function compiled(source: WasmSource): Promise<WebAssembly.Module> {
  const forget = (): void => {
    // Let a later call retry (e.g. after a network error).
    if (source.kind === 'bytes') compiledByBinary.delete(source.bytes);
    else compiledByKey.delete(key);
  };
  const key = source.kind === 'url' ? `url:${source.url.href}` : source.kind === 'path' ? `path:${source.path}` : '';
  const cached = source.kind === 'bytes' ? compiledByBinary.get(source.bytes) : compiledByKey.get(key);
  if (cached) return cached;
  const promise = compileModule(source).catch((error: unknown) => {
    forget();
    throw error;
  });
  if (source.kind === 'bytes') compiledByBinary.set(source.bytes, promise);
  else compiledByKey.set(key, promise);
  return promise;
}

/** Compiles (memoized) and says whether the module is a threaded build and whether it is a relaxed-SIMD one. */
export async function compiledBuild(
  source: WasmSource,
): Promise<{ wasmModule: WebAssembly.Module; threaded: boolean; relaxed: boolean }> {
  const wasmModule = await compiled(source);
  // The threaded build imports its (shared) memory; the others export theirs.
  const threaded = WebAssembly.Module.imports(wasmModule).some((i) => i.kind === 'memory');
  return { wasmModule, threaded, relaxed: needsRelaxedSimd(wasmModule) };
}
