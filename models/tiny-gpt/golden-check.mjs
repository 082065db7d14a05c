// The PyTorch checks of tiny-gpt (models/tiny-gpt/golden, made by make_golden.py): the one golden reader
// and the one checker, shared by the Node test (tests/js/tiny-gpt.test.mjs) and the page of the browser
// test (tests/browser/tiny-gpt.test.mjs). ESM importing only runner.mjs and models/lib, for Node, pages
// and Workers; every check returns {ok, message, worst, ...} and leaves the asserting to the caller.
//
// Shapes: V = vocab_size; a logits block of `rows` positions is (rows, V), row-major.
import { generate } from './runner.mjs';
import { compareLogits, goldenFetcher } from '../lib/golden.mjs';

export { compareLogits } from '../lib/golden.mjs';

/**
 * Reads golden/index.json and the float32 logits files it names.
 * @param {(file: string) => Promise<ArrayBuffer> | ArrayBuffer} readFile bytes of a file of golden/
 */
export async function readGolden(readFile) {
  const index = JSON.parse(new TextDecoder().decode(await readFile('index.json')));
  for (const entry of [index.logits, index.logitsF16KV]) entry.values = new Float32Array(await readFile(entry.file));
  return index;
}

/** golden/ fetched from `folderUrl` (the model's folder), for pages and Workers. */
export function fetchGolden(folderUrl) {
  return readGolden(goldenFetcher(folderUrl, 'tiny-gpt'));
}

/** The 200 bytes of the golden logits prompt. */
export const goldenPromptBytes = (golden) => [...new TextEncoder().encode(golden.logits.prompt)];

/** Both splits run one after the other: the second starts where the first failed, if it did. */
function combine(label, parts) {
  const failed = parts.find((p) => !p.ok);
  return {
    ok: !failed,
    worst: Math.max(...parts.map((p) => p.worst)),
    message: failed ? `${label}: ${failed.message}` : '',
  };
}

/** A full prefill of the 200-byte prompt, all logits, f32 K/V (tolerance 1e-4). */
export function checkFullPrefill(model, backend, golden) {
  const session = model.createSession(backend);
  try {
    const result = compareLogits(
      session.forward(goldenPromptBytes(golden), { allLogits: true }),
      golden.logits.values,
      0,
      200,
      model.config.vocab_size,
    );
    return combine('prefill(200)', [result]);
  } finally {
    session.free();
  }
}

/**
 * Prefill of `split[0]` bytes, then the rest in chunks of `split[1]` bytes (1 = single-byte decode steps),
 * f32 K/V, against PyTorch's f32 logits (tolerance 1e-4).
 */
export function checkSplitPrefill(model, backend, golden, [first, chunk] = [100, 1]) {
  const bytes = goldenPromptBytes(golden),
    V = model.config.vocab_size;
  const session = model.createSession(backend);
  try {
    const parts = [
      compareLogits(session.forward(bytes.slice(0, first), { allLogits: true }), golden.logits.values, 0, first, V),
    ];
    for (let p = first; p < bytes.length && parts.at(-1).ok; p += chunk) {
      const n = Math.min(chunk, bytes.length - p);
      parts.push(
        compareLogits(session.forward(bytes.slice(p, p + n), { allLogits: true }), golden.logits.values, p, n, V),
      );
    }
    return combine(`prefill(${first}) + chunks of ${chunk}`, parts);
  } finally {
    session.free();
  }
}

/**
 * f16 K/V: prefill(100) + 100 steps against PyTorch over the same f16-rounded K/V. The tolerance is 5e-4:
 * a k or v within float rounding of a binary16 rounding boundary rounds one way in JS (float64 sums) and
 * the other in PyTorch (float32 sums), which moves it by one f16 step (2^-11 relative) instead of 1e-7.
 * Also required: on average 10 times closer to that run than to PyTorch's f32 K/V run.
 */
export function checkF16Steps(model, backend, golden) {
  const bytes = goldenPromptBytes(golden),
    V = model.config.vocab_size;
  const session = model.createSession(backend);
  try {
    const logits = new Float32Array(200 * V);
    logits.set(session.forward(bytes.slice(0, 100), { allLogits: true }));
    for (let p = 100; p < 200; p++) logits.set(session.forward([bytes[p]]), p * V);
    const f16Reference = golden.logitsF16KV.values,
      f32Reference = golden.logits.values;
    const result = compareLogits(logits, f16Reference, 0, 200, V, 5e-4);
    let errorF16 = 0,
      errorF32 = 0;
    for (let i = 0; i < logits.length; i++) {
      errorF16 += Math.abs(logits[i] - f16Reference[i]);
      errorF32 += Math.abs(logits[i] - f32Reference[i]);
    }
    const meanF16 = errorF16 / logits.length,
      meanF32 = errorF32 / logits.length;
    const closer = meanF16 * 10 < meanF32;
    return {
      ok: result.ok && closer,
      worst: result.worst,
      meanF16,
      meanF32,
      message: !result.ok
        ? `f16 K/V: ${result.message}`
        : closer
          ? ''
          : `f16 K/V: mean error to the f16 run (${meanF16}) is not 10 times below that to the f32 run (${meanF32})`,
    };
  } finally {
    session.free();
  }
}

/**
 * Greedy generation of golden.generatedBytes bytes from each golden prompt: exactly PyTorch's bytes.
 * @param {'f32' | 'f16'} key which golden run (the backend's K/V dtype must match)
 */
export function checkGreedy(model, makeBackend, golden, key) {
  const decode = (tokens) => new TextDecoder().decode(Uint8Array.from(tokens));
  const texts = [];
  for (const g of golden.generations) {
    const session = model.createSession(makeBackend());
    try {
      const tokens = generate(session, [...new TextEncoder().encode(g.prompt)], golden.generatedBytes, {
        greedy: true,
      });
      texts.push(decode(tokens));
      const expected = g[key].tokens;
      if (tokens.length !== expected.length || tokens.some((t, i) => t !== expected[i])) {
        return {
          ok: false,
          worst: Infinity,
          texts,
          message: `greedy ${key}, prompt ${JSON.stringify(g.prompt)}: got ${JSON.stringify(decode(tokens))}, PyTorch ${JSON.stringify(g[key].text)}`,
        };
      }
    } finally {
      session.free();
    }
  }
  return { ok: true, worst: 0, texts, message: '' };
}
