// The PyTorch golden sets on disk (tests/golden/, format in its README), read in Node: the sets' folders,
// their cases and each case's files as typed arrays, and a v2 case's options by their API names. Shared by
// the JS tests (through tests/js/helpers.mjs), the browser and consumer suites and bench/accuracy.mjs.
// The in-page runner of the same sets (any JS engine, files fetched) is golden-runner.mjs.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file lives in scripts/lib/). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// The PyTorch golden vectors are test fixtures of this repository (tests/golden/README.md).
export const goldenDir = process.env.MHA_GOLDEN_DIR ?? path.join(repoRoot, 'tests/golden/v1');
export const goldenV2Dir = path.join(repoRoot, 'tests/golden/v2');
export const goldenV3Dir = path.join(repoRoot, 'tests/golden/v3');
export const goldenV4Dir = path.join(repoRoot, 'tests/golden/v4');

/** The cases of a golden set (`cases.json`); readGolden finds each case's files in its set's folder. */
export function loadGoldenCases(dir = goldenDir) {
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
  // Not enumerable: a case stays the plain data of cases.json (JSON.stringify, deepEqual).
  for (const c of cases) Object.defineProperty(c, 'dir', { value: dir });
  return cases;
}

/**
 * Reads a golden file as the typed array its role and name imply (mask and `.u8`: Uint8Array, `.f16`:
 * Uint16Array of binary16 bits, others: Float32Array).
 */
export function readGolden(c, role) {
  const file = c.files[role];
  if (file === undefined) throw new Error(`golden case ${c.name} has no ${role} file`);
  const bytes = fs.readFileSync(path.join(c.dir ?? goldenDir, file));
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  if (file.endsWith('.f16')) return new Uint16Array(copy);
  return role === 'mask' || file.endsWith('.u8') ? new Uint8Array(copy) : new Float32Array(copy);
}

/**
 * A v2 case's options by their API names (cases.json writes Infinity in a window as "Infinity"), with its
 * bias read from its file; plus its dims.
 */
export function goldenOptions(c) {
  const options = {
    batch: c.batch,
    seqLen: c.seqLen,
    kvSeqLen: c.kvSeqLen,
    dModel: c.dModel,
    numHeads: c.numHeads,
    ...c.options,
  };
  if (options.window) options.window = options.window.map((w) => (w === 'Infinity' ? Infinity : w));
  if (c.files.mask) options.mask = readGolden(c, 'mask');
  if (c.files.bias) options.bias = readGolden(c, 'bias');
  return options;
}
