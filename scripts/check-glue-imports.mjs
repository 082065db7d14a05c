// `node --experimental-wasm-relaxed-simd scripts/check-glue-imports.mjs glue.js module.wasm ...` (pairs):
// fails when an Emscripten glue offers the module other import names than the module asks for. That is
// what a binaryen other than Debian's does to emcc's import minification (scripts/emscripten-env.sh), and
// otherwise it shows only at instantiation, as a LinkError in whoever loads the build first.
import { readFileSync } from 'node:fs';

const pairs = process.argv.slice(2);
if (pairs.length === 0 || pairs.length % 2 !== 0)
  throw new Error('usage: check-glue-imports.mjs (glue.js module.wasm)...');
let failed = false;
for (let i = 0; i < pairs.length; i += 2) {
  const [glue, wasm] = [pairs[i], pairs[i + 1]];
  const offered = /asmLibraryArg=\{([^}]*)\}/.exec(readFileSync(glue, 'utf8'));
  if (!offered) throw new Error(`${glue}: no asmLibraryArg table found (another Emscripten version?)`);
  // Keys quoted as Emscripten writes them, or bare where esbuild minified the glue (the relaxed builds).
  const names = new Set(
    [...offered[1].matchAll(/(?:^|,)\s*(?:"([^"]+)"|([A-Za-z_$][\w$]*))\s*:/g)].map((m) => m[1] ?? m[2]),
  );
  const asked = WebAssembly.Module.imports(new WebAssembly.Module(readFileSync(wasm)))
    .filter((entry) => entry.kind === 'function')
    .map((entry) => entry.name);
  const missing = asked.filter((name) => !names.has(name));
  if (missing.length > 0) {
    failed = true;
    console.error(
      `${glue} does not provide the imports ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ', ...' : ''} that ${wasm} asks for`,
    );
  }
}
if (failed) process.exit(1);
