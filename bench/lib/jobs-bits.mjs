// The bits-per-byte job (issue 40): how much a compact cache costs where a user sees it, models/tiny-llama's
// validation bits per byte with each KV cache dtype and arithmetic (docs/spec.md 4.8, 5.1). Not timed.
// The text is the first 48 windows of 256 bytes of the model's own held-out split (models/tiny-llama/
// val-sample.txt: the KJV as tools/train.py splits it, every 20th of 100 chunks), scored as train.py's
// validation_bits_per_byte does: each window from an empty cache, its 256 next-byte predictions.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The cache configurations scored, float32 first (the others' reference). */
export const BITS_CONFIGS = [
  { dtype: 'float32' },
  { dtype: 'float16' },
  { dtype: 'bfloat16' },
  { dtype: 'int8' },
  { dtype: 'int8', arithmetic: 'integer' },
  { dtype: 'int4' },
  { dtype: 'int4', arithmetic: 'integer' },
];
/** The bounds on the increase over float32: int8 (either arithmetic) 0.3%, int4 3%. */
export const BITS_TARGETS = { int8: 0.003, int4: 0.03 };
const WINDOW = 256;

/** Bits per byte of `text` (Uint8Array) under `session`, window by window. */
function bitsPerByte(session, text, vocab) {
  let bits = 0,
    count = 0;
  for (let w = 0; w + WINDOW < text.length; w += WINDOW) {
    const tokens = Array.from(text.subarray(w, w + WINDOW));
    const logits = session.forward(tokens, { allLogits: true }); // (WINDOW, V)
    for (let i = 0; i < WINDOW; i++) {
      const row = logits.subarray(i * vocab, (i + 1) * vocab);
      let max = -Infinity;
      for (const x of row) max = Math.max(max, x);
      let sum = 0;
      for (const x of row) sum += Math.exp(x - max);
      bits += (Math.log(sum) + max - row[text[w + i + 1]]) / Math.LN2;
      count += 1;
    }
    session.truncate(0);
  }
  return bits / count;
}

/** One row per configuration: its bits per byte and the increase over float32's. */
export async function bitsRows({ onPhase }) {
  const { createMHA } = await import(new URL('../../dist/index.js', import.meta.url).href);
  const { readLlama, tinyLlamaDir } = await import('../../models/tiny-llama/load-node.mjs');
  const text = new Uint8Array(fs.readFileSync(fileURLToPath(new URL('val-sample.txt', `file://${tinyLlamaDir}/`))));
  const model = readLlama();
  const mha = await createMHA({ threads: 1 });
  const rows = [];
  try {
    for (const config of BITS_CONFIGS) {
      onPhase(`bits ${config.dtype} ${config.arithmetic ?? 'float'}`);
      const session = model.createSession(mha, { ...config, capacity: WINDOW });
      try {
        const bpb = bitsPerByte(session, text, model.dims.V);
        const increase = rows.length === 0 ? 0 : bpb / rows[0].bitsPerByte - 1;
        const bound = BITS_TARGETS[config.dtype];
        rows.push({
          dtype: config.dtype,
          arithmetic: config.arithmetic ?? 'float',
          bitsPerByte: bpb,
          increase,
          target: bound,
          pass: bound === undefined ? null : increase <= bound,
          bytes: text.length,
        });
      } finally {
        session.free();
      }
    }
  } finally {
    mha.dispose();
  }
  return rows;
}
