// The README's quick-start examples run, and print what the float64 JS reference computes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { expectedLastRow, referenceAll, referenceMHA, repoRoot } from './helpers.mjs';

test('examples/node.mjs (README Node quick start) prints the right last row', () => {
  const stdout = execFileSync(process.execPath, [path.join(repoRoot, 'examples/node.mjs')], { encoding: 'utf8' });
  assert.match(stdout, /out has shape \[2, 5, 12\]/);
  assert.ok(stdout.includes(`last row: ${expectedLastRow()}`), stdout);
});

test('examples/zero-copy.mjs (README zero-copy calls) prints the last row of two causal attention layers', () => {
  const stdout = execFileSync(process.execPath, [path.join(repoRoot, 'examples/zero-copy.mjs')], { encoding: 'utf8' });
  const shape = { batch: 2, seqLen: 5, dModel: 12, numHeads: 3, causal: true };
  const x = Float32Array.from({ length: 120 }, (_, i) => Math.sin(i));
  const hidden = referenceMHA(x, x, x, shape);
  const y = referenceMHA(hidden, hidden, hidden, shape);
  // The last query row sees every key of its batch item in both layers (the first row sees only itself).
  const expected = Array.from(y.subarray(108), (n) => n.toFixed(4)).join(' ');
  assert.ok(stdout.includes(`last row: ${expected}`), `${stdout} (expected ${expected})`);
});

test('examples/model-options.mjs (README options for real models) prints what the float64 reference computes', () => {
  const stdout = execFileSync(process.execPath, [path.join(repoRoot, 'examples/model-options.mjs')], {
    encoding: 'utf8',
  });
  const fill = (length, phase) => Float32Array.from({ length }, (_, i) => Math.sin(i * 0.7 + phase));
  const row = (values) => Array.from(values, (n) => n.toFixed(4)).join(' ');
  const gqa = referenceMHA(fill(6 * 64, 0), fill(6 * 16, 1), fill(6 * 16, 2), {
    batch: 1,
    seqLen: 6,
    dModel: 64,
    numHeads: 8,
    numKvHeads: 2,
    causal: true,
  });
  const x = fill(10 * 16, 3);
  const windowed = referenceMHA(x, x, x, {
    batch: 1,
    seqLen: 10,
    dModel: 16,
    numHeads: 2,
    causal: true,
    window: [3, 0],
  });
  const decode = referenceAll(fill(64, 4), fill(9 * 16, 5), fill(9 * 16, 6), {
    batch: 1,
    seqLen: 1,
    kvSeqLen: 9,
    dModel: 64,
    numHeads: 8,
    numKvHeads: 2,
    causal: true,
    queryOffset: 8,
  });
  for (const line of [
    `gqa last row: ${row(gqa.subarray(5 * 64))}`,
    `window last row: ${row(windowed.subarray(9 * 16))}`,
    `decode row: ${row(decode.out)}`,
    `decode lse: ${row(decode.lse)}`,
  ]) {
    assert.ok(stdout.includes(line), `${stdout}\n(expected the line "${line}")`);
  }
});
