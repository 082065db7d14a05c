// The v4 golden cases (tests/golden/v4, format in its README) in any JavaScript engine, for
// golden-runner.mjs's runGoldenCase: a KV cache step by step over a shared prefix, with a reorder or as a
// ring (kind 'serving'), and attention states merged (kind 'merge'). Pure ECMAScript like the runner. The
// runner passes its file reader and accuracy rules in (`rules`): importing them would make an import cycle.

/** The attend options of a serving case (lse: true, so each step also gives its log-sum-exp). */
function attendOptions(c, rope, callOptions) {
  const options = { numHeads: c.numHeads, lse: true };
  const given = callOptions(c, rope);
  for (const key of ['window', 'softcap', 'alibiSlopes', 'sinks', 'rope'])
    if (given[key] !== undefined) options[key] = given[key];
  return options;
}

/** Copies a step's (B, n, width) rows into rows [t, t + n) of the stacked (B, S, width). */
function placeRows(stacked, step, batch, rows, width, t, n) {
  for (let b = 0; b < batch; b++)
    stacked.set(step.subarray(b * n * width, (b + 1) * n * width), (b * rows + t) * width);
}

/** A step's lse (B, H, n) into columns [t, t + n) of the stacked (B, H, S). */
function placeLse(stacked, step, batchHeads, rows, t, n) {
  for (let r = 0; r < batchHeads; r++) stacked.set(step.subarray(r * n, (r + 1) * n), r * rows + t);
}

/**
 * Runs serving case `c`: a prefix cache prefilled with prefixQ/K/V when the case has one, then the cache
 * (ring or not) through c.cache.steps with newTokens, reordered after step reorder.afterStep. Checks out
 * and lse of every step (stacked) against out64 and lse64, the prefix's out against prefixOut64, lengths
 * and stored after each step, and the values read back against kread/vread (bit for bit).
 */
export async function runServingCase(mha, c, read, onOutput, rules) {
  const { callOptions, checkLse, checkOut, readRole, sameBits, sliceRows } = rules;
  const checks = [];
  const record = (what, check) => checks.push({ what, pass: check.ok, ...check });
  const f = (role) => readRole(read, c, role);
  const { batch: B, seqLen: S, numHeads: H, headDim: Dh } = c;
  const Hkv = c.options.numKvHeads ?? H;
  const Dv = c.options.vHeadDim ?? Dh;
  const [q, k, v, out64, out32, lse64] = await Promise.all(['q', 'k', 'v', 'out64', 'out32', 'lse64'].map(f));
  const rope = c.options.rope ? { cos: await f(c.options.rope.cos), sin: await f(c.options.rope.sin) } : undefined;
  const options = attendOptions(c, rope, callOptions);
  const config = { batch: B, numKvHeads: Hkv, headDim: Dh, capacity: c.cache.capacity, dtype: c.cache.dtype };
  if (c.options.vHeadDim !== undefined) config.vHeadDim = Dv;
  const cache = mha.createKVCache(c.cache.ring ? { ...config, ring: true } : config);
  let prefix;
  try {
    if (c.prefix) {
      const Lp = c.prefix.length;
      prefix = mha.createKVCache({ ...config, batch: 1, capacity: Lp });
      const [pq, pk, pv, p64, p32] = await Promise.all(
        ['prefixQ', 'prefixK', 'prefixV', 'prefixOut64', 'prefixOut32'].map(f),
      );
      record(
        `prefix prefill (${Lp} tokens) vs prefixOut64`,
        checkOut(prefix.attend(pq, pk, pv, options).out, p64, p32),
      );
      if (c.files.prefixKread) {
        const stored = prefix.read();
        const [kr, vr] = await Promise.all(['prefixKread', 'prefixVread'].map(f));
        checks.push({
          what: 'prefix read back: prefixKread, prefixVread bit for bit',
          pass: sameBits(stored.k, kr) && sameBits(stored.v, vr),
        });
      }
    }
    const out = new Float32Array(B * S * H * Dv);
    const lse = new Float32Array(B * H * S);
    const lengths = [];
    const stored = [];
    let t = 0;
    for (const [i, n] of c.cache.steps.entries()) {
      const step = { ...options };
      if (c.cache.newTokens) step.newTokens = c.cache.newTokens[i];
      if (prefix) step.prefix = prefix;
      const r = cache.attend(
        sliceRows(q, B, S, H * Dh, t, n),
        sliceRows(k, B, S, Hkv * Dh, t, n),
        sliceRows(v, B, S, Hkv * Dv, t, n),
        step,
      );
      placeRows(out, r.out, B, S, H * Dv, t, n);
      placeLse(lse, r.lse, B * H, S, t, n);
      t += n;
      if (c.cache.reorder?.afterStep === i) cache.reorder(c.cache.reorder.indices);
      lengths.push([...cache.lengths]);
      if (c.cache.ring) stored.push([...cache.stored]);
    }
    onOutput(out);
    const what = `KV cache (${c.cache.dtype}${c.cache.ring ? ', ring' : ''}${prefix ? ', prefix' : ''}${c.cache.reorder ? ', reorder' : ''})`;
    const same = (what, got, want) =>
      checks.push({
        what: `${what} after each step as cache.${what}`,
        pass: JSON.stringify(got) === JSON.stringify(want),
        problem: `${JSON.stringify(got)}, expected ${JSON.stringify(want)}`,
      });
    same('lengths', lengths, c.cache.lengths);
    if (c.cache.ring) same('stored', stored, c.cache.stored);
    record(`${what}: out of every step vs out64`, checkOut(out, out64, out32));
    record(`${what}: lse of every step vs lse64`, checkLse(lse, lse64));
    if (c.files.kread) {
      const now = cache.read();
      const [kr, vr] = await Promise.all(['kread', 'vread'].map(f));
      checks.push({
        what: `${what}: read back equals kread, vread bit for bit`,
        pass: sameBits(now.k, kr) && sameBits(now.v, vr),
      });
    }
  } finally {
    cache.free();
    prefix?.free();
  }
  return { name: c.name, checks };
}

/**
 * Runs merge case `c`: mergeAttention over the shipped partial states (partOut, partLse), and over the
 * states multiHeadAttention gives for each part's mask; both against out64 and lse64 (a row empty in every
 * part: out 0 and lse −Infinity exactly, which checkOut and checkLse require).
 */
export async function runMergeCase(mha, c, read, onOutput, rules) {
  const { callOptions, checkLse, checkOut, readRole } = rules;
  const checks = [];
  const record = (what, check) => checks.push({ what, pass: check.ok, ...check });
  const f = (role) => readRole(read, c, role);
  const [q, k, v, out64, out32, lse64] = await Promise.all(['q', 'k', 'v', 'out64', 'out32', 'lse64'].map(f));
  const rope = c.options.rope ? { cos: await f(c.options.rope.cos), sin: await f(c.options.rope.sin) } : undefined;
  const shape = { batch: c.batch, seqLen: c.seqLen, numHeads: c.numHeads };
  const given = [];
  const computed = [];
  const call = { ...shape, kvSeqLen: c.kvSeqLen, dModel: c.dModel, ...callOptions(c, rope) };
  for (let p = 0; p < c.parts; p++) {
    given.push({ out: await f(`partOut${p}`), lse: await f(`partLse${p}`) });
    const lse = new Float32Array(c.batch * c.numHeads * c.seqLen);
    const out = mha.multiHeadAttention(q, k, v, { ...call, mask: await f(`partMask${p}`), lse });
    computed.push({ out, lse });
  }
  const fromFiles = mha.mergeAttention(given, shape);
  onOutput(fromFiles.out);
  record(`mergeAttention of ${c.parts} shipped states vs out64`, checkOut(fromFiles.out, out64, out32));
  record(`mergeAttention of ${c.parts} shipped states: lse vs lse64`, checkLse(fromFiles.lse, lse64));
  const merged = mha.mergeAttention(computed, shape);
  record(`mergeAttention of ${c.parts} multiHeadAttention parts vs out64`, checkOut(merged.out, out64, out32));
  record(`mergeAttention of ${c.parts} multiHeadAttention parts: lse vs lse64`, checkLse(merged.lse, lse64));
  return { name: c.name, checks };
}
