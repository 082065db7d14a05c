// Zero-copy calls: two attention layers whose activations stay on the wasm heap, so neither call copies
// its inputs in or its output out.
import { createMHA } from 'mha-wasm';

const mha = await createMHA();
const [batch, seqLen, dModel, numHeads] = [2, 5, 12, 3];
const shape = { batch, seqLen, dModel, numHeads, causal: true };
const x = mha.allocate(batch * seqLen * dModel);
x.set(Float32Array.from({ length: x.length }, (_, i) => Math.sin(i)));
const hidden = mha.allocate(x.length);
const y = mha.allocate(x.length);
mha.multiHeadAttention(x, x, x, { ...shape, out: hidden }); // layer 1: q = k = v = x
mha.multiHeadAttention(hidden, hidden, hidden, { ...shape, out: y }); // layer 2 reads layer 1's output in place
// y.data is a live view of the heap: read it now, and read it again after any later call.
console.log('last row:', Array.from(y.data.subarray(y.length - dModel), (n) => n.toFixed(4)).join(' '));
mha.dispose(); // frees x, hidden and y too
