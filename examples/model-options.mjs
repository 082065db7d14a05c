// The README's "Options for real models": grouped-query attention (Llama), a sliding window (Mistral) and a
// decode step placed by queryOffset. Inputs are deterministic (sin), so the tests check every printed row.
import { createMHA } from 'mha-wasm';

const mha = await createMHA();
const fill = (length, phase) => Float32Array.from({ length }, (_, i) => Math.sin(i * 0.7 + phase));
const row = (values) => Array.from(values, (n) => n.toFixed(4)).join(' ');

// Llama-style grouped-query attention: 8 query heads of size 8 share 2 KV heads; a causal prefill of 6 tokens.
// q is (batch, seqLen, numHeads * 8), k and v are (batch, seqLen, numKvHeads * 8): the KV heads are not copied.
const llama = { batch: 1, seqLen: 6, dModel: 64, numHeads: 8, numKvHeads: 2, causal: true };
const gqa = mha.multiHeadAttention(fill(6 * 64, 0), fill(6 * 16, 1), fill(6 * 16, 2), llama);
console.log('gqa last row:', row(gqa.subarray(5 * 64)));

// Mistral-style sliding window of 4 keys: each query sees itself and the 3 keys before it.
const mistral = { batch: 1, seqLen: 10, dModel: 16, numHeads: 2, causal: true, window: [3, 0] };
const x = fill(10 * 16, 3);
const windowed = mha.multiHeadAttention(x, x, x, mistral);
console.log('window last row:', row(windowed.subarray(9 * 16)));

// A decode step: one new token's query over 9 keys, the 8 cached before it and its own. queryOffset =
// kvSeqLen - seqLen puts the query at position 8 (lower-right alignment); lse receives the log-sum-exp of
// each head, (batch, numHeads, seqLen), to merge with attention over other keys later.
const decode = {
  batch: 1,
  seqLen: 1,
  kvSeqLen: 9,
  dModel: 64,
  numHeads: 8,
  numKvHeads: 2,
  causal: true,
  queryOffset: 8,
};
const lse = new Float32Array(8);
const step = mha.multiHeadAttention(fill(64, 4), fill(9 * 16, 5), fill(9 * 16, 6), { ...decode, lse });
console.log('decode row:', row(step));
console.log('decode lse:', row(lse));
