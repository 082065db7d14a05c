// How the synthetic view writes numbers: times, differences, weights and shape tuples, one place each, so
// the panels that show the same kind of number show it the same way.

export function fmtTime(ms) {
  if (!Number.isFinite(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toPrecision(3)} µs`;
  if (ms < 1000) return `${ms.toPrecision(3)} ms`;
  return `${(ms / 1000).toPrecision(3)} s`;
}
export const fmtDiff = (d) => (d === 0 ? '0' : Number.isFinite(d) ? d.toExponential(2) : String(d));
export const tuple = (xs) => `(${xs.join(', ')})`;
export const fmtWeight = (w) => (w === 0 ? '0' : w < 1e-4 ? w.toExponential(2) : w.toFixed(4));
