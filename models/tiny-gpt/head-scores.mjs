// Head scores of tiny-gpt from attention weights (the definitions of analyze_heads.py / heads.json), for
// the Node test against PyTorch's scores and for the demo's live labels. Plain ESM without imports.
//
// Shapes: H heads, S query rows at positions queryOffset .. queryOffset + S - 1, T keys held.

/** Per position i of tokens: i - 1, or -1 for position 0 (no previous token). */
export function previousTokenTargets(tokens) {
  return Array.from(tokens, (_, i) => i - 1);
}

/**
 * Per position i: the position after the last earlier occurrence of tokens[i] (what an induction head
 * attends to, to copy what came next last time), or -1 when tokens[i] did not occur before.
 */
export function inductionTargets(tokens) {
  const lastSeen = new Map();
  return Array.from(tokens, (token, i) => {
    const target = lastSeen.has(token) ? lastSeen.get(token) + 1 : -1;
    lastSeen.set(token, i);
    return target;
  });
}

/**
 * Adds, per head, the weight each query row puts on its target key to sums[h], and 1 to counts[h] per row
 * with a target (>= 0). weights (H, S, T); targets indexed by absolute position.
 */
export function accumulateTargetWeights(sums, counts, weights, H, S, T, queryOffset, targets) {
  for (let i = 0; i < S; i++) {
    const target = targets[queryOffset + i];
    if (!(target >= 0)) continue;
    for (let h = 0; h < H; h++) {
      sums[h] += weights[(h * S + i) * T + target];
      counts[h] += 1;
    }
  }
}

/**
 * Mean previous-token and induction scores per layer and head of sequences, each run by `attend(tokens)`,
 * which returns the layers' {weights (H, S, S), kvLength} of one prefill.
 * @returns {{previousToken: Float64Array, induction: Float64Array}} (L, H) row-major
 */
export function headScores(sequences, attend, L, H) {
  const scores = {};
  for (const [name, targetsOf] of [
    ['previousToken', previousTokenTargets],
    ['induction', inductionTargets],
  ]) {
    const sums = new Float64Array(L * H),
      counts = new Float64Array(L * H);
    for (const tokens of sequences) {
      const targets = targetsOf(tokens);
      attend(tokens).forEach(({ weights, kvLength }, layer) => {
        accumulateTargetWeights(
          sums.subarray(layer * H, (layer + 1) * H),
          counts.subarray(layer * H, (layer + 1) * H),
          weights,
          H,
          tokens.length,
          kvLength,
          0,
          targets,
        );
      });
    }
    scores[name] = sums.map((s, i) => s / counts[i]);
  }
  return scores;
}
