// The PyTorch checks of tiny-llama (models/tiny-llama/golden, made by make_golden.py): the one golden
// reader and the one checker, shared by the Node test (tests/js/tiny-llama.test.mjs) and the page of the
// browser test (tests/browser/tiny-llama.test.mjs). ESM importing only runner.mjs and models/lib, for Node,
// pages and Workers; every check returns {ok, message, worst, worstAbs, ...} and leaves the asserting to
// the caller.
//
// Shapes: V = vocab_size; P prompt bytes, then `decodeSteps` tokens: a run's logits are (P + steps, V).
import { generate, generateBatch } from './runner.mjs';
import { compareLogits, goldenFetcher } from '../lib/golden.mjs';
import { decodeBytes, encodeBytes } from '../lib/generate.mjs';

/**
 * Tolerance of each K/V dtype, as a fraction of max(1, |PyTorch's logit|).
 * f32: the JS dense products sum in float64 and mha-wasm in float32, PyTorch in float32 in another
 * order: the committed model's worst is 0.09 of 1e-4 (tests/js/tiny-llama.test.mjs reports it).
 * f16: a k or v within float rounding of a binary16 rounding boundary rounds one way here and the other
 * in PyTorch, which moves it by one f16 step (2^-11 relative) instead of 1e-7; such flips among the
 * 4 x 2 x 64 k and v values per token move a logit by up to several 1e-4: the committed model's worst is
 * 0.42 of 1e-3 (8.7e-4 on a logit below 2), against 5.7e-3 between PyTorch's f16 and f32 K/V runs.
 */
export const TOLERANCE = { float32: 1e-4, float16: 1e-3 };

/**
 * Reads golden/index.json and the float32 logits files it names (runs.f32.values, runs.f16.values).
 * @param {(file: string) => Promise<ArrayBuffer> | ArrayBuffer} readFile bytes of a file of golden/
 */
export async function readGolden(readFile) {
  const index = JSON.parse(new TextDecoder().decode(await readFile('index.json')));
  for (const run of Object.values(index.runs)) run.values = new Float32Array(await readFile(run.file));
  return index;
}

/** golden/ fetched from `folderUrl` (the model's folder), for pages and Workers. */
export const fetchGolden = (folderUrl) => readGolden(goldenFetcher(folderUrl, 'tiny-llama'));

const KEYS = { float32: 'f32', float16: 'f16' };

const sameTokens = (a, b) => a.length === b.length && a.every((t, i) => t === b[i]);

function meanAbsDiff(a, b) {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i] - b[i]);
  return sum / a.length;
}

/** Several comparisons in order: the first failure, else the largest errors. */
function combine(label, parts) {
  const failed = parts.find((p) => !p.ok);
  return {
    ok: !failed,
    worst: Math.max(...parts.map((p) => p.worst)),
    worstAbs: Math.max(...parts.map((p) => p.worstAbs ?? Infinity)),
    message: failed ? `${label}: ${failed.message}` : '',
  };
}

/**
 * Prefill of the prompt (logits at every position), then `decodeSteps` single-token steps fed PyTorch's
 * greedy tokens of the same K/V dtype, each step's logits against PyTorch's row. When both dtypes' PyTorch
 * runs have the same tokens, also: on average 5 times closer to the run of the cache's dtype than to the
 * other's (meanOwn, meanOther).
 * @param {import('./runner.mjs').Llama} model
 * @param {object} mha an instance from createMHA()
 * @param {object} golden from readGolden
 * @param {'float32' | 'float16'} dtype the KV cache's
 */
export function checkPrefillAndSteps(model, mha, golden, dtype) {
  const run = golden.runs[KEYS[dtype]],
    V = model.dims.V,
    tolerance = TOLERANCE[dtype];
  const prompt = encodeBytes(golden.prompt);
  const session = model.createSession(mha, { dtype });
  try {
    const logits = new Float32Array(run.values.length);
    logits.set(session.forward(prompt, { allLogits: true }));
    const parts = [compareLogits(logits.subarray(0, prompt.length * V), run.values, 0, prompt.length, V, tolerance)];
    for (let i = 0; i < run.tokens.length && parts.at(-1).ok; i++) {
      const row = session.forward([run.tokens[i]]);
      logits.set(row, (prompt.length + i) * V);
      parts.push(compareLogits(row, run.values, prompt.length + i, 1, V, tolerance));
    }
    const result = combine(`${dtype} K/V, prefill(${prompt.length}) + ${run.tokens.length} steps`, parts);
    const other = golden.runs[dtype === 'float16' ? 'f32' : 'f16'];
    if (!result.ok || !sameTokens(other.tokens, run.tokens)) return result;
    // The other dtype's PyTorch run on the same tokens: the cache must be much closer to its own dtype's
    // run (an f32 cache could otherwise pass the looser f16 check). Measured: 300 times closer with the
    // f32 cache, 10.7 times with the f16 one (whose rounding flips, above, are a tenth of the gap)
    const meanOwn = meanAbsDiff(logits, run.values),
      meanOther = meanAbsDiff(logits, other.values);
    const closer = meanOwn * 5 < meanOther;
    return {
      ...result,
      ok: closer,
      meanOwn,
      meanOther,
      message: closer
        ? ''
        : `${dtype} K/V: mean |diff| to PyTorch with the same K/V dtype (${meanOwn}) is not 5 times below that to the other dtype's (${meanOther})`,
    };
  } finally {
    session.free();
  }
}

/** Every golden prompt with what PyTorch generated from it greedily: {prompt, tokens} per prompt. */
function goldenGenerations(golden, key) {
  return [
    { prompt: golden.prompt, tokens: golden.runs[key].tokens },
    ...golden.generations.map((g) => ({ prompt: g.prompt, tokens: g[key].tokens })),
  ];
}

/**
 * Greedy generation from every golden prompt, one session each: exactly PyTorch's tokens.
 * @param {'float32' | 'float16'} dtype
 */
export function checkGreedy(model, mha, golden, dtype) {
  const texts = [];
  for (const g of goldenGenerations(golden, KEYS[dtype])) {
    const session = model.createSession(mha, { dtype });
    try {
      const tokens = generate(session, encodeBytes(g.prompt), g.tokens.length, { greedy: true });
      texts.push(decodeBytes(tokens));
      if (!sameTokens(tokens, g.tokens)) {
        return {
          ok: false,
          worst: Infinity,
          texts,
          message: `greedy ${dtype}, prompt ${JSON.stringify(g.prompt)}: got ${JSON.stringify(decodeBytes(tokens))}, PyTorch ${JSON.stringify(decodeBytes(g.tokens))}`,
        };
      }
    } finally {
      session.free();
    }
  }
  return { ok: true, worst: 0, texts, message: '' };
}

/**
 * All golden prompts (of different lengths) prefilled and decoded together in one ragged session of
 * batch B = the number of prompts: each sequence's greedy tokens are PyTorch's, the logits of the first
 * prompt's ragged prefill are PyTorch's at every position, and every sequence's prefill logits are, bit
 * for bit, those of the same prompt alone.
 * @param {'float32' | 'float16'} dtype
 */
export function checkRaggedBatch(model, mha, golden, dtype) {
  const generations = goldenGenerations(golden, KEYS[dtype]);
  const count = Math.min(...generations.map((g) => g.tokens.length));
  const prompts = generations.map((g) => encodeBytes(g.prompt));
  const session = model.createSession(mha, { dtype, batch: prompts.length });
  try {
    const prefill = session.forwardBatch(prompts, { allLogits: true });
    const logits = compareLogits(
      prefill[0],
      golden.runs[KEYS[dtype]].values,
      0,
      prompts[0].length,
      model.dims.V,
      TOLERANCE[dtype],
    );
    if (!logits.ok)
      return { ...logits, message: `ragged prefill of ${prompts.length} prompts, ${dtype} K/V: ${logits.message}` };
    // docs/spec.md 4.6: each sequence's rows are those of a batch of 1 (the dense layers are row by row)
    for (const [b, prompt] of prompts.entries()) {
      const alone = model.createSession(mha, { dtype });
      const own = alone.forward(prompt, { allLogits: true });
      alone.free();
      const at = own.findIndex((x, i) => !Object.is(x, prefill[b][i]));
      if (at >= 0)
        return {
          ok: false,
          worst: Infinity,
          message: `ragged prefill, ${dtype} K/V, prompt ${b}: logit ${at} is ${prefill[b][at]}, alone ${own[at]}`,
        };
    }
    session.truncateEach(prompts.map(() => 0));
    const outputs = generateBatch(session, prompts, count, { greedy: true });
    for (const [b, g] of generations.entries()) {
      if (!sameTokens(outputs[b], g.tokens.slice(0, count))) {
        return {
          ok: false,
          worst: Infinity,
          message: `ragged batch of ${prompts.length}, ${dtype} K/V, prompt ${b} ${JSON.stringify(g.prompt)}: got ${JSON.stringify(decodeBytes(outputs[b]))}, PyTorch ${JSON.stringify(decodeBytes(g.tokens.slice(0, count)))}`,
        };
      }
    }
    return { ok: true, worst: logits.worst, worstAbs: logits.worstAbs, texts: outputs.map(decodeBytes), message: '' };
  } finally {
    session.free();
  }
}
