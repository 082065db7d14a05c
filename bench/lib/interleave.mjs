// Interleaved timing of several contestants in ONE process: every round times each contestant once, in
// forward order on even rounds and backward on odd ones (A, B, B, A, A, B, ...), so a slow spell of the
// shared machine falls on all of them. A ratio between two contestants is then taken per round and
// reported as the median and range over the rounds (issue #13, #14: ratios from one run).
// Isomorphic: no imports.

const now = () => performance.now();

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Median, min and max of a list of numbers. */
export function spread(xs) {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) };
}

/**
 * A contestant is { name, run(), before?() }: `run` is one call (sync or async); when it returns a
 * number, that is its own time in ms (a generation loop that times only its steps), else the call is
 * timed around. `before` runs untimed ahead of every call (e.g. evicting the last-level cache).
 *
 * Warm-up per contestant: the first call (its time is `firstCallMs`), then calls until >= 2 and >= 300 ms
 * (none after a first call over 2 s). A sample is the mean of `calls` calls, calibrated so that a sample
 * is >= `sampleMs`. Rounds run until `budgetMs` is spent, at least `minRounds`, at most `maxRounds`.
 *
 * @returns {{ rounds: number, contestants: { name, firstCallMs, callsPerSample, roundMs: number[], medianMs, minMs, maxMs }[] }}
 */
export async function interleave(
  contestants,
  { budgetMs = 3000, minRounds = 5, maxRounds = 100, sampleMs = 5, onPhase = () => {} } = {},
) {
  const timeOne = async (c) => {
    c.before?.();
    const t = now();
    const self = await c.run();
    return typeof self === 'number' ? self : now() - t;
  };
  const state = [];
  for (const c of contestants) {
    onPhase(`warmup ${c.name}`);
    const firstCallMs = await timeOne(c);
    let warm = 0;
    const tWarm = now();
    if (firstCallMs < 2000) {
      while (warm < 2 || (now() - tWarm < 300 && warm < 50)) {
        await timeOne(c);
        warm++;
      }
    }
    const estimate = warm > 0 ? await timeOne(c) : firstCallMs;
    state.push({
      name: c.name,
      firstCallMs,
      callsPerSample: Math.min(1000, Math.max(1, Math.ceil(sampleMs / Math.max(estimate, 1e-3)))),
      roundMs: [],
    });
  }
  onPhase('rounds');
  const forward = contestants.map((_, i) => i);
  const backward = [...forward].reverse();
  const tStart = now();
  let rounds = 0;
  while (rounds < maxRounds && (rounds < minRounds || now() - tStart < budgetMs)) {
    for (const i of rounds % 2 === 0 ? forward : backward) {
      let total = 0;
      for (let n = 0; n < state[i].callsPerSample; n++) total += await timeOne(contestants[i]);
      state[i].roundMs.push(total / state[i].callsPerSample);
    }
    rounds++;
  }
  for (const s of state) {
    const { median: medianMs, min: minMs, max: maxMs } = spread(s.roundMs);
    Object.assign(s, { medianMs, minMs, maxMs });
  }
  return { rounds, contestants: state };
}

/**
 * Per-round ratio of two contestants of one interleave() result, as { median, min, max, rounds }.
 * `speed`: time of `b` / time of `a` (above 1: a is faster); otherwise time of `a` / time of `b`.
 */
export function roundRatio(result, a, b, { speed = true } = {}) {
  const find = (name) => {
    const c = result.contestants.find((x) => x.name === name);
    if (!c)
      throw new Error(`roundRatio: no contestant "${name}" (have ${result.contestants.map((x) => x.name).join(', ')})`);
    return c.roundMs;
  };
  const [ta, tb] = [find(a), find(b)];
  const ratios = ta.map((t, r) => (speed ? tb[r] / t : t / tb[r]));
  return { ...spread(ratios), rounds: ratios.length };
}
