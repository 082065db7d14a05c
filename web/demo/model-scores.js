// Live head scores of the real-model view: sums and counts per (layer, head) of the weight each query puts
// on its target (the previous byte; the byte after the last earlier occurrence of the current one), with
// the definitions of models/tiny-gpt/head-scores.mjs.
//
// Shapes: L layers, H heads, S query rows, T keys held.
import { accumulateTargetWeights, inductionTargets, previousTokenTargets } from '../../models/tiny-gpt/head-scores.mjs';
import { state } from './model-state.js';

export function resetScores() {
  const n = state.dims.layers * state.dims.heads;
  state.scores = {
    previousToken: { sums: new Float64Array(n), counts: new Float64Array(n) },
    induction: { sums: new Float64Array(n), counts: new Float64Array(n) },
  };
}

/** weights (H, S, T) of queries at positions queryOffset .. + S - 1 of layer. */
export function addScores(layer, weights, S, T, queryOffset) {
  const H = state.dims.heads;
  for (const [name, targetsOf] of [
    ['previousToken', previousTokenTargets],
    ['induction', inductionTargets],
  ]) {
    const { sums, counts } = state.scores[name];
    const at = [layer * H, (layer + 1) * H];
    accumulateTargetWeights(
      sums.subarray(...at),
      counts.subarray(...at),
      weights,
      H,
      S,
      T,
      queryOffset,
      targetsOf(state.tokens),
    );
  }
}

/** The mean weight on `name`'s target of (layer, head) over the queries so far; NaN before any. */
export const liveScore = (name, layer, head) => {
  const { sums, counts } = state.scores[name];
  const i = layer * state.dims.heads + head;
  return counts[i] ? sums[i] / counts[i] : NaN;
};
