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
 * @property {number[][]} [sequences] the tokens each sequence holds: a session that holds some is
 *   continued (see generateBatch)
 */

/**
 * Where sequence b stands after `add` is appended to the `held` tokens, in a context of nCtx: appended
 * as they are while they fit; else the context is refilled (reset: the session is truncated to 0 and
 * `list` prefilled again) with the newer half of `held` and `add`, at most the last nCtx of them. For one
 * token after a full context that keeps its newer half (learned positions cannot go past the context;
 * rope positions were never trained past it); for a fresh sequence (nothing held), the last nCtx of the
 * prompt. The one rule for a fresh prompt, every step and a session continued with new tokens.
 * @returns {{reset: boolean, list: number[], held: number[]}}
 */
function advance(held, add, nCtx) {
  if (held.length + add.length <= nCtx) return { reset: false, list: add, held: [...held, ...add] };
  const kept = [...held.slice(held.length - (nCtx - Math.floor(nCtx / 2))), ...add].slice(-nCtx);
  return { reset: held.length > 0, list: kept, held: kept.slice() };
}

/**
 * Generates `count` tokens after each prompt, all B sequences together: one prefill of every prompt
 * (ragged: each is as long as it is), then one call per step that appends each sequence's new token.
 * When a sequence's context is full, its older half is dropped and the rest prefilled again in the same
 * call as the others' steps (see advance). Each sequence draws from its own mulberry32(seed) stream, so
 * every sequence gets what it would get alone.
 *
 * A session that already holds tokens (one restored from a saved state, or left by an earlier call) is
 * continued: its tokens are the history that `prompts` are appended to. The last token an earlier call
 * returned was chosen but never fed, so continuing passes it as the prompt; with `drawn` = the tokens
 * generated before from the same seed (sampling takes one draw per token), N tokens and then M give the
 * N + M of one call.
 * @param {BatchSession} session B = prompts.length sequences, fresh or holding tokens (`session.sequences`)
 * @param {ArrayLike<number>[]} prompts token ids, at least one each
 * @param {number} count tokens to generate per prompt
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seed?: number, drawn?: number, forwardOptions?: object, onToken?: (token: number, b: number) => void}} [options]
 *   drawn: draws of each sequence's seeded stream already spent; forwardOptions go to every forwardBatch
 *   call; onToken(token, b) runs after each chosen token
 * @returns {number[][]} the generated tokens, per prompt
 */
export function generateBatch(
  session,
  prompts,
  count,
  { greedy = false, temperature = 0.8, topK = 40, seed = 1, drawn = 0, forwardOptions = {}, onToken } = {},
) {
  const nCtx = session.contextLength;
  if (prompts.length !== session.batch)
    throw new RangeError(
      `generateBatch: prompts: expected ${session.batch} (the session's batch), got ${prompts.length}`,
    );
  if (!Number.isInteger(drawn) || drawn < 0)
    throw new RangeError(`generateBatch: drawn: expected a non-negative integer, got ${drawn}`);
  prompts.forEach((prompt, b) => {
    if (prompt.length === 0) throw new RangeError(`generateBatch: prompts[${b}]: expected at least 1 token, got 0`);
  });
  const randoms = prompts.map(() => {
    const random = mulberry32(seed);
    for (let i = 0; i < drawn; i++) random();
    return random;
  });
  let held = prompts.map((_, b) => Array.from(session.sequences?.[b] ?? [])); // what each sequence holds
  /** Appends next[b] to each sequence (truncating the ones that refill) and returns the logits. */
  const feed = (next) => {
    const steps = held.map((h, b) => advance(h, next[b], nCtx));
    if (steps.some((s) => s.reset)) session.truncateEach(steps.map((s, b) => (s.reset ? 0 : held[b].length)));
    held = steps.map((s) => s.held);
    return session.forwardBatch(
      steps.map((s) => s.list.slice()),
      forwardOptions,
    );
  };
  let logits = feed(prompts.map((p) => Array.from(p)));
  const out = prompts.map(() => []);
  for (let i = 0; i < count; i++) {
    const next = held.map((h, b) => {
      const token = greedy ? argmax(logits[b]) : sampleToken(logits[b], { temperature, topK, random: randoms[b] });
      out[b].push(token);
      onToken?.(token, b);
      return [token];
    });
    if (i === count - 1) break;
    logits = feed(next);
  }
  return out;
}

/**
 * generateBatch for one prompt: `count` tokens after `prompt`.
 * @param {BatchSession} session a session of one sequence, fresh or holding tokens (see generateBatch)
 * @param {ArrayLike<number>} prompt
 * @param {number} count
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seed?: number, drawn?: number, forwardOptions?: object, onToken?: (token: number) => void}} [options]
 * @returns {number[]}
 */
export function generate(session, prompt, count, options = {}) {
  if (prompt.length === 0) throw new RangeError('generate: prompt: expected at least 1 token, got 0');
  return generateBatch(session, [prompt], count, options)[0];
}
