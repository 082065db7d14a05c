// Several continuations of one prompt that hold and read the prompt once (docs/spec.md 5.2, 5.4): samples
// drawn with their own seeds, and beam search. The prompt runs once in a session of one sequence, the
// prefix; the continuations are the sequences of a second session created over it (a runner's
// createSession({ prefix })), so every layer's cache holds the prompt once and a step reads it once for
// all of them. ESM for Node, pages and Workers; its only import is the token choice of generate.mjs.
//
// Shapes: N samples or beams, V = vocabulary size.
import { argmax, sampleToken } from './generate.mjs';
import { mulberry32 } from '../../scripts/lib/prng.mjs';

/**
 * @typedef {object} PrefixSessions
 * @property {{forwardBatch: Function, batch: number, contextLength: number, lengths: number[]}} prefix
 *   a fresh session of one sequence: the prompt
 * @property {{forwardBatch: Function, reorder?: Function, batch: number, contextLength: number}} continuations
 *   a fresh session of N sequences over `prefix`
 */

/** Checks that the prompt and `count` tokens fit the two sessions; returns N. */
function checkFit(fn, { prefix, continuations }, prompt, count) {
  if (prompt.length === 0) throw new RangeError(`${fn}: prompt: expected at least 1 token, got 0`);
  if (!Number.isInteger(count) || count < 1)
    throw new RangeError(`${fn}: count: expected a positive integer, got ${count}`);
  if (prompt.length > prefix.contextLength)
    throw new RangeError(
      `${fn}: prompt: ${prompt.length} tokens exceed the prefix's capacity of ${prefix.contextLength}`,
    );
  if (count - 1 > continuations.contextLength)
    throw new RangeError(
      `${fn}: count: ${count} tokens exceed the continuations' capacity of ${continuations.contextLength} (+ 1)`,
    );
  return continuations.batch;
}

/**
 * N samples of one prompt: sample b draws its tokens from mulberry32(seeds[b]) (one draw per token, as
 * generate.mjs does), so each gets what `generate(session, prompt, count, { seed: seeds[b] })` gives alone;
 * greedy: every sample is the argmax path.
 * @param {PrefixSessions} sessions
 * @param {ArrayLike<number>} prompt
 * @param {number} count tokens per sample
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seeds?: number[], onToken?: (token: number, b: number) => void}} [options]
 *   seeds: N integers, default 1, 2, ..., N
 * @returns {number[][]} the tokens of each sample
 */
export function generateSamples(sessions, prompt, count, options = {}) {
  const n = checkFit('generateSamples', sessions, prompt, count);
  const { greedy = false, temperature = 0.8, topK = 40, onToken } = options;
  const seeds = options.seeds ?? Array.from({ length: n }, (_, b) => b + 1);
  if (seeds.length !== n) throw new RangeError(`generateSamples: seeds: expected ${n} seeds, got ${seeds.length}`);
  const randoms = seeds.map((seed) => mulberry32(seed));
  const promptLogits = sessions.prefix.forwardBatch([Array.from(prompt)])[0];
  let logits = seeds.map(() => promptLogits);
  const out = seeds.map(() => []);
  for (let i = 0; i < count; i++) {
    const next = logits.map((l, b) => {
      const token = greedy ? argmax(l) : sampleToken(l, { temperature, topK, random: randoms[b] });
      out[b].push(token);
      onToken?.(token, b);
      return [token];
    });
    if (i === count - 1) break;
    logits = sessions.continuations.forwardBatch(next);
  }
  return out;
}

/** log softmax(logits), in float64. */
function logSoftmax(logits) {
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(logits, (x) => x - lse);
}

/**
 * The `width` best (parent, token) extensions of scored beams: by total log-probability, ties by parent
 * then token (so that the search is deterministic).
 * @param {{score: number}[]} beams
 * @param {Float32Array[]} logits per beam (V)
 */
export function bestExtensions(beams, logits, width) {
  const candidates = [];
  beams.forEach((beam, parent) => {
    const logp = logSoftmax(logits[parent]);
    logp.forEach((lp, token) => candidates.push({ parent, token, score: beam.score + lp }));
  });
  candidates.sort((a, b) => b.score - a.score || a.parent - b.parent || a.token - b.token);
  return candidates.slice(0, width);
}

/**
 * Beam search of N beams over one prompt: each step keeps the N best extensions of the beams by total
 * log-probability (a beam may be kept twice, another dropped), reorders the continuations' caches to
 * match (`continuations.reorder`, docs/spec.md 5.4) and feeds the chosen tokens. The first step's beams
 * are the N best first tokens (distinct).
 * @param {PrefixSessions} sessions continuations: N = the beam width, with reorder(indices)
 * @param {ArrayLike<number>} prompt
 * @param {number} count tokens per beam
 * @returns {{tokens: number[], score: number}[]} the final beams, best first
 */
export function beamSearch(sessions, prompt, count) {
  const n = checkFit('beamSearch', sessions, prompt, count);
  if (typeof sessions.continuations.reorder !== 'function')
    throw new TypeError('beamSearch: continuations: expected a session with reorder(indices)');
  const promptLogits = sessions.prefix.forwardBatch([Array.from(prompt)])[0];
  let beams = bestExtensions([{ tokens: [], score: 0 }], [promptLogits], n).map((c) => ({
    tokens: [c.token],
    score: c.score,
  }));
  for (let i = 1; i < count; i++) {
    const logits = sessions.continuations.forwardBatch(beams.map((beam) => [beam.tokens[beam.tokens.length - 1]]));
    const chosen = bestExtensions(beams, logits, n);
    sessions.continuations.reorder(chosen.map((c) => c.parent));
    beams = chosen.map((c) => ({ tokens: [...beams[c.parent].tokens, c.token], score: c.score }));
  }
  return beams;
}
