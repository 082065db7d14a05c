// The shipped declarations (dist/index.d.ts) of the options of docs/spec.md Parts 2 and 4: a consumer using
// every option compiles under tsc --strict, and each deliberate misuse is a type error on its own line.
// multiHeadAttention and KVCache.attend are generic over their tensor dtype (multiHeadAttention's dtype,
// attend's tensorDType or its alias dtype): 'float16' makes q, k, v and the result Float16Tensor, else
// Float32Array (or HeapTensor); a misspelt option is still a type error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { repoRoot } from './helpers.mjs';

const GOOD = `
import { createMHA } from 'mha-wasm';
import { ropeTables } from 'mha-wasm';
import type { AttentionOptions, AttentionWeightsOptions, Float16Tensor, HeapTensor } from 'mha-wasm';
export async function run(): Promise<void> {
  const mha = await createMHA();
  const q = new Float32Array(2 * 5 * 16);
  const kv = new Float32Array(2 * 5 * 8);
  const bias: HeapTensor = mha.allocate(1 * 4 * 5 * 5);
  const options: AttentionOptions = {
    batch: 2, seqLen: 5, dModel: 16, numHeads: 4, numKvHeads: 2, queryOffset: 3, kvLengths: [5, 2], window: [4, Infinity],
    softcap: 30, alibiSlopes: [0.5, 0.25, 0.125, 0.0625], bias, biasShape: [1, 4, 5, 5], emptyRows: 'zero', causal: true,
    lse: new Float32Array(2 * 4 * 5), out: new Float32Array(q.length),
  };
  mha.multiHeadAttention(q, kv, kv, options);
  mha.multiHeadAttention(q, kv, kv, { ...options, kvLengths: new Int32Array([5, 2]), alibiSlopes: new Float32Array(4), bias: new Float32Array(100), lse: mha.allocate(40) });
  const { out: _out, lse: _lse, ...rest } = options;
  const weightsOptions: AttentionWeightsOptions = rest;
  mha.attentionWeights(q, kv, { batch: 2, seqLen: 5, dModel: 16, numHeads: 4, numKvHeads: 2, window: [1, 0], emptyRows: 'nan' });
  mha.attentionWeights(q, kv, weightsOptions);
  // v3 (docs/spec.md Part 4): vHeadDim, float16 tensors, sinks, rope, stage, ropeTables.
  const rope = { ...mha.ropeTables({ rotaryDim: 4, positions: 5 }), rotaryDim: 4, interleaved: false };
  const mla: Float32Array = mha.multiHeadAttention(q, kv, new Float32Array(2 * 5 * 2 * 3), { batch: 2, seqLen: 5, dModel: 16, numHeads: 4,
    numKvHeads: 2, vHeadDim: 3, sinks: [0, 1, 2, 3], rope });
  const half: Uint16Array = new Uint16Array(q.length);
  const halfOut: Float16Tensor = mha.multiHeadAttention(half, half, half, { batch: 2, seqLen: 5, dModel: 16, numHeads: 4, dtype: 'float16' });
  const scores: Float32Array = mha.attentionWeights(q, kv, { ...weightsOptions, stage: 'biased', sinks: new Float32Array(4), rope });
  const cache = mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 4, capacity: 8, vHeadDim: 3, dtype: 'float16' });
  const step: Float16Tensor = cache.attend(new Uint16Array(16), new Uint16Array(8), new Uint16Array(6), { numHeads: 4, dtype: 'float16', rope, sinks: [1, 2, 3, 4] });
  const f32Step: Float32Array = cache.attend(new Float32Array(16), new Float32Array(8), new Float32Array(6), { numHeads: 4, rope });
  const halfStep: Float16Tensor = cache.attend(new Uint16Array(16), new Uint16Array(8), new Uint16Array(6), { numHeads: 4, tensorDType: 'float16' });
  void [mla, halfOut, scores, step, f32Step, halfStep, ropeTables];
}
`;

// [line, expected error code]: each line of BAD holds one misuse.
const BAD_LINES = [
  ['mha.multiHeadAttention(q, q, q, { ...shape, window: [1] });', 'TS2322'],
  ['mha.multiHeadAttention(q, q, q, { ...shape, window: [1, 2, 3] });', 'TS2322'],
  ["mha.multiHeadAttention(q, q, q, { ...shape, emptyRows: 'none' });", 'TS2322'],
  ['mha.multiHeadAttention(q, q, q, { ...shape, kvLengths: new Float32Array(2) });', 'TS2322'],
  ['mha.multiHeadAttention(q, q, q, { ...shape, biasShape: [1, 1, 5] });', 'TS2322'],
  ["mha.multiHeadAttention(q, q, q, { ...shape, softcap: '30' });", 'TS2322'],
  ["mha.multiHeadAttention(q, q, q, { ...shape, dtype: 'bfloat16' });", 'TS2820'],
  ['mha.multiHeadAttention(q, q, q, { ...shape, rope: { cos: q } });', 'TS2741'],
  ["mha.multiHeadAttention(q, q, q, { ...shape, stage: 'scaled' });", 'TS2353'],
  [
    "const f32: Float32Array = mha.multiHeadAttention(new Uint16Array(120), new Uint16Array(120), new Uint16Array(120), { ...shape, dtype: 'float16' });",
    'TS2',
  ],
  ['mha.multiHeadAttention(q, q, q, { ...shape, numKVHeads: 1 });', 'TS2561'],
  ["mha.attentionWeights(q, q, { ...shape, stage: 'weights' });", 'TS2322'],
  ['mha.attentionWeights(q, q, { ...shape, vHeadDim: 2 });', 'TS2353'],
  ["mha.attentionWeights(q, q, { ...shape, dtype: 'float16' });", 'TS2353'],
  [
    "const f32Step: Float32Array = mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 4, capacity: 8 }).attend(new Uint16Array(4), new Uint16Array(4), new Uint16Array(4), { numHeads: 1, tensorDType: 'float16' });",
    'TS2',
  ],
  [
    "mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 4, capacity: 8 }).attend(q, q, q, { numHeads: 1, tensorDType: 'int8' });",
    'TS2',
  ],
  ['mha.attentionWeights(q, q, { ...shape, lse: new Float32Array(30) });', 'TS2353'],
  ['mha.attentionWeights(q, q, { ...shape, out: new Float32Array(120) });', 'TS2353'],
];
const BAD = `
import { createMHA } from 'mha-wasm';
export async function run(): Promise<void> {
  const mha = await createMHA();
  const q = new Float32Array(120);
  const shape = { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 };
${BAD_LINES.map(([line]) => `  ${line}`).join('\n')}
}
`;

/** Diagnostics of `source` compiled strictly against the package's dist/index.d.ts, as 'mha-wasm'. */
function diagnostics(source) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mha-types-'));
  try {
    const file = path.join(dir, 'consumer.ts');
    fs.writeFileSync(file, source);
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ES2022,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
      types: [],
      paths: { 'mha-wasm': [path.join(repoRoot, 'dist/index.d.ts')] },
    });
    return ts.getPreEmitDiagnostics(program).map((d) => ({
      line: d.file ? d.file.getLineAndCharacterOfPosition(d.start).line : -1,
      text: `TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`,
    }));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('dist/index.d.ts: a consumer using every v2 option compiles with strict types', () => {
  assert.deepEqual(
    diagnostics(GOOD).map((d) => d.text),
    [],
  );
});

test('dist/index.d.ts: each misuse of a v2 option is a type error on its line', () => {
  const found = diagnostics(BAD);
  const firstLine = BAD.split('\n').findIndex((l) => l.includes(BAD_LINES[0][0]));
  BAD_LINES.forEach(([line, code], n) => {
    const here = found.filter((d) => d.line === firstLine + n);
    assert.ok(
      here.some((d) => d.text.startsWith(code)),
      `"${line}": expected ${code}, got ${JSON.stringify(here)}`,
    );
  });
  assert.equal(found.length, BAD_LINES.length, JSON.stringify(found, null, 1));
});
