// The per-sequence state of a KV cache that the TS layer mirrors (docs/spec.md 4.6, 5.5): lengths (the
// tokens appended) and stored counts (the tokens held: fewer in a ring cache that dropped some), what an
// attend adds to them, and a ring's window rule, which reads both.
import type { CacheConfig } from './kv-cache-config.js';

/** A cache's per-sequence lengths and stored counts (kv-cache.ts's, updated by the call). */
export interface CacheSequences {
  lengths: Int32Array;
  stored: Int32Array;
}

/**
 * A ring's window (docs/spec.md 5.5): bounded on the left, its extent W with W + n <= capacity, and W at most
 * the stored tokens of a sequence that dropped some, so that no query reaches a token the ring overwrote.
 */
export function checkRingWindow(
  fn: string,
  c: CacheConfig,
  { lengths, stored }: CacheSequences,
  n: number,
  w: number,
  count: (b: number) => number,
): void {
  const rule = `a ring cache needs a window [W, ...] with W + n <= capacity (${c.capacity}, n = ${n})`;
  if (w < 0) throw new RangeError(`${fn}: window: ${rule}, got no bound on the left; nothing was stored`);
  if (w + n > c.capacity) throw new RangeError(`${fn}: window: ${rule}, got W = ${w}; nothing was stored`);
  for (let b = 0; b < c.batch; b++) {
    if (lengths[b]! > stored[b]! && count(b) > 0 && w > stored[b]!) {
      throw new RangeError(
        `${fn}: window: W = ${w} would reach positions the ring overwrote: sequence ${b} holds only its last ` +
          `stored[${b}] = ${stored[b]} tokens (positions from ${lengths[b]! - stored[b]!}), ` +
          `expected W <= ${stored[b]}; nothing was stored`,
      );
    }
  }
}

/** The sequences' lengths and stored counts after an attend of count(b) tokens (stored: at most `held`). */
export function addTokens({ lengths, stored }: CacheSequences, count: (b: number) => number, held: number): void {
  for (let b = 0; b < lengths.length; b++) {
    lengths[b]! += count(b);
    stored[b] = Math.min(held, stored[b]! + count(b));
  }
}
