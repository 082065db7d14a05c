// Runs in the JavaScriptCore shell, not in Node: `jsc -m tests/jsc/golden.jsc.mjs -- <build>` from the
// repository root, <build> `simd` or `baseline`. tests/jsc/jsc.test.mjs runs it and reads its output.
//
// The shell is bare ECMAScript plus print/readFile/setTimeout. Four shims give the package what it uses
// from a browser: console, TextDecoder (the Emscripten glue decodes Embind strings), URL (the glue and
// createMHA resolve the .wasm next to the script, even when the bytes come as wasmBinary) and clearTimeout
// (createMHA clears its start-up timer; without it the promise never settles and jsc exits 0 silently,
// which is why the last line must be "done").
//
// Output, one line each: `result <JSON>` per golden set, then `done`; anything else is a message from
// the package (`console.<level>: ...`) or an error (`error: ...`, exit code 3).
const write = (line) => print(line);
globalThis.console = Object.fromEntries(
  ['log', 'info', 'warn', 'error', 'debug'].map((level) => [
    level,
    (...args) => write(`console.${level}: ${args.map(String).join(' ')}`),
  ]),
);

globalThis.TextDecoder = class TextDecoder {
  constructor(label = 'utf-8') {
    this.encoding = String(label)
      .toLowerCase()
      .replace(/^utf8$/, 'utf-8');
    if (this.encoding !== 'utf-8' && this.encoding !== 'utf-16le')
      throw new RangeError(`TextDecoder shim: ${label} is not supported`);
  }

  decode(input = new Uint8Array(0)) {
    const bytes =
      input instanceof Uint8Array
        ? input
        : new Uint8Array(input.buffer ?? input, input.byteOffset ?? 0, input.byteLength);
    let text = '';
    if (this.encoding === 'utf-16le') {
      for (let i = 0; i + 1 < bytes.length; i += 2) text += String.fromCharCode(bytes[i] | (bytes[i + 1] << 8));
      return text;
    }
    for (let i = 0; i < bytes.length;) {
      const b = bytes[i];
      const extra = b < 0x80 ? 0 : b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : 1;
      let code = extra === 0 ? b : b & (0x3f >> extra);
      for (let j = 1; j <= extra; j++) code = (code << 6) | (bytes[i + j] & 0x3f);
      text += String.fromCodePoint(code);
      i += extra + 1;
    }
    return text;
  }
};

// Only what the package does with URLs here: resolve a file name against import.meta.url (file://).
globalThis.URL = class URL {
  constructor(url, base) {
    const text = String(url);
    this.href =
      /^[a-z][a-z0-9+.-]*:/i.test(text) || base === undefined
        ? text
        : String(base).replace(/[^/]*([?#].*)?$/, '') + text.replace(/^\.\//, '');
  }

  toString() {
    return this.href;
  }
};

const cancelled = new Set();
let nextTimer = 1;
const shellSetTimeout = globalThis.setTimeout;
globalThis.setTimeout = (callback, ms = 0, ...args) => {
  const id = nextTimer++;
  shellSetTimeout(() => {
    if (!cancelled.delete(id)) callback(...args);
  }, ms);
  return id;
};
globalThis.clearTimeout = (id) => {
  cancelled.add(id);
};

try {
  const build = globalThis.arguments[0];
  if (build !== 'simd' && build !== 'baseline')
    throw new Error(`expected the build (simd or baseline) after --, got ${build}`);
  const { createMHA } = await import('../../dist/index.js');
  const { GOLDEN_SETS, runGoldenSet } = await import('../../scripts/lib/golden-runner.mjs');
  const wasmBinary = readFile(build === 'simd' ? 'dist/mha.wasm' : 'dist/mha-baseline.wasm', 'binary');
  const mha = await createMHA(build === 'simd' ? { wasmBinary } : { wasmBinary, simd: false });
  for (const set of GOLDEN_SETS) {
    const folder = `tests/golden/${set}/`;
    const read = (file) => readFile(folder + file, 'binary');
    const cases = JSON.parse(readFile(`${folder}cases.json`));
    write(`result ${JSON.stringify({ set, info: { ...mha.info }, results: await runGoldenSet(mha, cases, read) })}`);
  }
  write('done');
} catch (error) {
  write(`error: ${error?.constructor?.name}: ${error?.message ?? error} ${error?.stack ?? ''}`.replace(/\n/g, ' | '));
  // jsc exits with 3 on an uncaught exception.
  throw error;
}
