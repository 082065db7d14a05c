// Plain-JS implementation (scripts/lib/reference.mjs): straightforward loops, float64 accumulators.
// On shapes too large for a full call inside the time budget, only `rows` (an evenly spread subset
// of query rows) are computed and the time is extrapolated by (B*S)/rows.length by the caller.
import { attentionRows } from '../../scripts/lib/reference.mjs';

export function create(shape, { rows } = {}) {
  const all = Int32Array.from({ length: shape.B * shape.S }, (_, r) => r);
  const which = rows ?? all;
  return {
    info: {
      accumulate: 'float64',
      rows: which.length,
      totalRows: all.length,
      mask: shape.causal ? 'causal (skip j > i)' : 'none',
    },
    run(q, k, v) {
      const out = new Float32Array(shape.B * shape.S * shape.D);
      return attentionRows(q, k, v, shape, which, out, false);
    },
    dispose() {},
  };
}
