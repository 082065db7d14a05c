// The README's quick-start examples run, and print what the float64 JS reference computes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { repoRoot, expectedLastRow, referenceMHA } from './helpers.mjs';

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
