// The demo's colors. The scale of the attention weights is shared by the synthetic view (heatmaps.js) and
// the real model's view (model-view.js); the head hues and the masked / NaN fills belong to the synthetic
// view, where the heatmaps and the split/merge diagram must agree on them.

// Sequential scale for weights (light = small, dark = large), YlGnBu-like.
export const RAMP = ['#ffffd9', '#edf8b1', '#c7e9b4', '#7fcdbb', '#41b6c4', '#1d91c0', '#225ea8', '#253494', '#081d58'];
const RAMP_RGB = RAMP.map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
export function rampColor(t) {
  const x = Math.min(1, Math.max(0, t)) * (RAMP_RGB.length - 1);
  const i = Math.min(RAMP_RGB.length - 2, Math.floor(x));
  const f = x - i;
  const a = RAMP_RGB[i];
  const b = RAMP_RGB[i + 1];
  return `rgb(${Math.round(a[0] + (b[0] - a[0]) * f)},${Math.round(a[1] + (b[1] - a[1]) * f)},${Math.round(a[2] + (b[2] - a[2]) * f)})`;
}

// Masked cells are light grey hatched with a darker grey; a fully masked row (its weights are NaN) is dark.
export const MASKED_FILL = '#e4e4e7';
export const MASKED_HATCH = '#a1a1aa';
export const NAN_FILL = '#3f3f46';

// One hue per head (cycled), used by the split/merge diagram and the heatmap captions.
const HEAD_HUES = [221, 330, 142, 25, 262, 188, 45, 0];
const headHue = (h) => HEAD_HUES[h % HEAD_HUES.length] + 11 * Math.floor(h / HEAD_HUES.length);
export const headColor = (h, lightness = 48) => `hsl(${headHue(h)} 70% ${lightness}%)`;
/** A value-shaded cell color of head h: darker for large positive values, lighter for negative. */
export const valueColor = (h, value) =>
  Number.isFinite(value) ? `hsl(${headHue(h)} 72% ${Math.round(55 - 22 * Math.tanh(value / 1.5))}%)` : NAN_FILL;
