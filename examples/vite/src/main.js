// No configuration needed: the package finds mha.wasm with `new URL('./mha.wasm', import.meta.url)`,
// which Vite rewrites to the hashed asset it emits into dist/assets/.
import { createMHA } from 'mha-wasm';

const info = document.querySelector('#info');
const result = document.querySelector('#result');
try {
  const mha = await createMHA();
  info.textContent = `mha-wasm ${mha.info.version} (simd: ${mha.info.simd})`;
  const [batch, seqLen, dModel, numHeads] = [2, 5, 12, 3];
  const x = Float32Array.from({ length: batch * seqLen * dModel }, (_, i) => Math.sin(i)); // q = k = v
  const out = mha.multiHeadAttention(x, x, x, { batch, seqLen, dModel, numHeads, causal: true });
  result.textContent = `last row: ${Array.from(out.subarray(out.length - dModel), (n) => n.toFixed(4)).join(' ')}`;
} catch (error) {
  result.textContent = `error: ${error.message}`;
  throw error;
}
