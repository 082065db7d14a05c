// Token choice and the generation loop shared by every runner of models/ (tiny-gpt, the Llama runner),
// and the byte tokenizer of their byte-level models. ESM whose only import is the project's seeded PRNG
// (scripts/lib/prng.mjs, itself import-free), for Node, pages and Workers.
//
// Shapes: B sequences generated together, V = vocabulary size.
import { mulberry32 } from '../../scripts/lib/prng.mjs';

/** UTF-8 bytes of text: the token ids of a byte-level model (0-255, no tokenizer). */
export const encodeBytes = (text) => [...new TextEncoder().encode(text)];

/** Byte ids -> text (invalid UTF-8, e.g. a character cut in two, becomes U+FFFD). */
export const decodeBytes = (tokens) => new TextDecoder().decode(Uint8Array.from(tokens));

/** The index of the largest logit; the first one on a tie (as torch.argmax). */
export function argmax(logits) {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  return best;
}

/**
 * Draws a token from softmax(logits / temperature) restricted to the topK largest logits.
 * @param {Float32Array} logits (V)
 * @param {{temperature: number, topK: number, random: () => number}} options
 */
export function sampleToken(logits, { temperature, topK, random }) {
  if (!(temperature > 0)) return argmax(logits);
  const order = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a] || a - b);
  const kept = order.slice(0, Math.max(1, Math.min(topK || logits.length, logits.length)));
  const max = logits[kept[0]];
  const weights = kept.map((i) => Math.exp((logits[i] - max) / temperature));
  let r = random() * weights.reduce((a, b) => a + b, 0);
  for (let j = 0; j < kept.length; j++) {
    r -= weights[j];
    if (r < 0) return kept[j];
  }
  return kept[kept.length - 1];
}

/**
 * @typedef {object} BatchSession
 * What generateBatch drives: B sequences, each with its own tokens.
 * @property {number} batch B
 * @property {number} contextLength most tokens a sequence may hold
 * @property {(lists: ArrayLike<number>[], options?: object) => Float32Array[]} forwardBatch
 *   appends lists[b] (possibly empty, if not all are) to sequence b and returns, per sequence, the logits
 *   (V) of its last new token (null for a sequence given no tokens)
 * @property {(lengths: number[]) => void} truncateEach keeps the first lengths[b] tokens of sequence b
 */

/**
 * Generates `count` tokens after each prompt, all B sequences together: one prefill of every prompt
 * (ragged: each is as long as it is), then one call per step that appends each sequence's new token.
 * When a sequence's context is full, its older half is dropped and the rest prefilled again in the same
 * call as the others' steps (learned positions cannot go past the context; rope positions were never
 * trained past it). Each sequence draws from its own mulberry32(seed) stream, so every sequence gets what
 * it would get alone.
 * @param {BatchSession} session a fresh session of B = prompts.length sequences
 * @param {ArrayLike<number>[]} prompts token ids, at least one each
 * @param {number} count tokens to generate per prompt
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seed?: number, forwardOptions?: object, onToken?: (token: number, b: number) => void}} [options]
 *   forwardOptions go to every forwardBatch call; onToken(token, b) runs after each chosen token
 * @returns {number[][]} the generated tokens, per prompt
 */
export function generateBatch(session, prompts, count, { greedy = false, temperature = 0.8, topK = 40, seed = 1, forwardOptions = {}, onToken } = {}) {
  const nCtx = session.contextLength;
  if (prompts.length !== session.batch) throw new RangeError(`generateBatch: prompts: expected ${session.batch} (the session's batch), got ${prompts.length}`);
  const held = prompts.map((prompt, b) => {
    if (prompt.length === 0) throw new RangeError(`generateBatch: prompts[${b}]: expected at least 1 token, got 0`);
    return Array.from(prompt).slice(-nCtx);
  });
  const randoms = prompts.map(() => mulberry32(seed));
  let logits = session.forwardBatch(held.map((h) => h.slice()), forwardOptions);
  const out = prompts.map(() => []);
  for (let i = 0; i < count; i++) {
    const next = held.map((h, b) => {
      const token = greedy ? argmax(logits[b]) : sampleToken(logits[b], { temperature, topK, random: randoms[b] });
      out[b].push(token);
      onToken?.(token, b);
      return token;
    });
    if (i === count - 1) break;
    const full = held.map((h) => h.length === nCtx);
    if (full.some(Boolean)) session.truncateEach(held.map((h, b) => (full[b] ? 0 : h.length)));
    const lists = held.map((h, b) => {
      if (full[b]) held[b] = h.slice(nCtx - Math.floor(nCtx / 2));
      const list = full[b] ? [...held[b], next[b]] : [next[b]];
      held[b].push(next[b]);
      return list;
    });
    logits = session.forwardBatch(lists, forwardOptions);
  }
  return out;
}

/**
 * generateBatch for one prompt: `count` tokens after `prompt`.
 * @param {BatchSession} session a fresh session of one sequence
 * @param {ArrayLike<number>} prompt
 * @param {number} count
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seed?: number, forwardOptions?: object, onToken?: (token: number) => void}} [options]
 * @returns {number[]}
 */
export function generate(session, prompt, count, options = {}) {
  if (prompt.length === 0) throw new RangeError('generate: prompt: expected at least 1 token, got 0');
  return generateBatch(session, [prompt], count, options)[0];
}
