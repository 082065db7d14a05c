// The README's Node quick start: multi-head attention over the spec's example shape.
import { createMHA } from 'mha-wasm';

const mha = await createMHA();
const [batch, seqLen, dModel, numHeads] = [2, 5, 12, 3];
const x = Float32Array.from({ length: batch * seqLen * dModel }, (_, i) => Math.sin(i)); // q = k = v
const out = mha.multiHeadAttention(x, x, x, { batch, seqLen, dModel, numHeads, causal: true });
console.log(`mha-wasm ${mha.info.version} (simd: ${mha.info.simd}): out has shape [${batch}, ${seqLen}, ${dModel}]`);
console.log('last row:', Array.from(out.subarray(out.length - dModel), (n) => n.toFixed(4)).join(' '));
