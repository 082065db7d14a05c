// Benchmark shapes. B batch, S query rows, T key/value rows, D model size, H heads (Dh = D / H).

export const SHAPES = [
  { name: 'seed', B: 2, S: 5, T: 5, D: 12, H: 3, causal: false },
  { name: 'bert', B: 1, S: 128, T: 128, D: 768, H: 12, causal: false },
  { name: 'bert-b8', B: 8, S: 128, T: 128, D: 768, H: 12, causal: false },
  { name: 'causal512', B: 1, S: 512, T: 512, D: 512, H: 8, causal: true },
  { name: 'cross', B: 4, S: 64, T: 1024, D: 512, H: 8, causal: false },
  { name: 'long2k', B: 1, S: 2048, T: 2048, D: 768, H: 12, causal: false },
  { name: 'long8k', B: 1, S: 8192, T: 8192, D: 512, H: 8, causal: false },
];

export function shapeByName(name) {
  const s = SHAPES.find((x) => x.name === name);
  if (!s) throw new Error(`unknown shape "${name}" (expected one of ${SHAPES.map((x) => x.name).join(', ')})`);
  return s;
}

/** FLOPs per call: 4*B*H*S*T*Dh (QK^T and PV, 2 FLOPs per multiply-add each), masked positions included. */
export function flopsOf(shape) {
  const Dh = shape.D / shape.H;
  return 4 * shape.B * shape.H * shape.S * shape.T * Dh;
}

export function describeShape(s) {
  return `(${s.B},${s.S},${s.T},${s.D},${s.H}${s.causal ? ',causal' : ''})`;
}
