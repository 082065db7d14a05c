// The README's quick-start examples run, and print what the float64 JS reference computes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { repoRoot, expectedFirstRow } from './helpers.mjs';

test('examples/node.mjs (README Node quick start) prints the right first row', () => {
  const stdout = execFileSync(process.execPath, [path.join(repoRoot, 'examples/node.mjs')], { encoding: 'utf8' });
  assert.match(stdout, /out has shape \[2, 5, 12\]/);
  assert.ok(stdout.includes(`first row: ${expectedFirstRow()}`), stdout);
});
