// What Llama.restoreSession checks of a saved session state (runner.mjs): the state's tokens and bytes,
// each layer's loaded cache against the model and the tokens. ESM without imports, for Node, pages and
// Workers.

/** state of restoreSession, checked: B token lists of token ids and one Uint8Array per layer. */
export function checkState(fn, state, { L, V }) {
  if (typeof state !== 'object' || state === null)
    throw new TypeError(
      `${fn}: state: expected what LlamaSession.saveState returned, got ${state === null ? 'null' : typeof state}`,
    );
  const { tokens, caches } = state;
  if (!Array.isArray(tokens) || tokens.length < 1 || !tokens.every(Array.isArray)) {
    throw new TypeError(
      `${fn}: state.tokens: expected an array of B >= 1 token arrays, got ${Array.isArray(tokens) ? `an array of ${tokens.length} (${tokens.map((t) => (Array.isArray(t) ? 'array' : typeof t)).join(', ')})` : typeof tokens}`,
    );
  }
  tokens.forEach((list, b) =>
    list.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new RangeError(`${fn}: state.tokens[${b}][${i}]: expected an integer in [0, ${V}), got ${t}`);
    }),
  );
  if (!Array.isArray(caches) || !caches.every((c) => c instanceof Uint8Array))
    throw new TypeError(
      `${fn}: state.caches: expected an array of Uint8Array (one cache.save() per layer), got ${Array.isArray(caches) ? caches.map((c) => c?.constructor?.name ?? typeof c).join(', ') : typeof caches}`,
    );
  if (caches.length !== L)
    throw new RangeError(`${fn}: state.caches: expected ${L} (one per layer), got ${caches.length}`);
  return { tokens: tokens.map((list) => list.slice()), caches };
}

/** mha.loadKVCache; a refusal (bytes that are no save, too small a capacity) rethrown with `what` in front. */
export function loadCache(what, mha, bytes, capacity) {
  try {
    return mha.loadKVCache(bytes, { capacity });
  } catch (error) {
    throw new error.constructor(`${what}: ${error.message}`);
  }
}

/** A loaded cache against the model and the saved tokens: batch, lengths, dtype and K/V widths. */
export function checkLoadedCache(what, cache, tokens, { Hkv, Dh }, dtype) {
  const lengths = [...cache.lengths];
  if (lengths.length !== tokens.length)
    throw new RangeError(
      `${what}: expected a cache of batch ${tokens.length} (state.tokens' sequences), got batch ${lengths.length}`,
    );
  const expected = tokens.map((t) => t.length);
  if (lengths.some((m, b) => m !== expected[b]))
    throw new RangeError(`${what}: expected lengths [${expected}] (state.tokens'), got [${lengths}]`);
  if (cache.dtype !== dtype) throw new RangeError(`${what}: expected dtype ${dtype} (layer 0's), got ${cache.dtype}`);
  // The cache has no numKvHeads getter: one token read back tells its widths
  const T = Math.min(...lengths);
  if (T > 0) {
    const { k, v } = cache.read({ start: 0, end: 1 });
    const width = Hkv * Dh * tokens.length;
    if (k.length !== width || v.length !== width)
      throw new RangeError(
        `${what}: expected K and V of ${Hkv} KV heads of ${Dh} (the model's), got ${k.length / tokens.length} and ${v.length / tokens.length} values per token`,
      );
  }
}
