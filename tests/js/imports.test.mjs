// The import graph of the repository's own JS and TS (git ls-files: *.mjs, *.js, *.cjs, *.ts outside
// node_modules and dist): the rooms' rules of issue #29 and no cycles. Runtime code (models/, web/,
// examples/) imports neither bench/ nor tests/; bench/ and scripts/ do not import tests/; scripts/lib/
// (the code runtime, tests and bench share) imports neither. Static imports, re-exports and dynamic
// imports of a string literal count, relative ones and the '/'-rooted ones of served pages alike.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from './helpers.mjs';

const SOURCE = /\.(mjs|js|cjs|ts)$/;
const files = execFileSync('git', ['ls-files', '-z'], { cwd: repoRoot, encoding: 'utf8' })
  .split('\0')
  .filter(
    (f) =>
      SOURCE.test(f) &&
      !f.startsWith('node_modules/') &&
      !f.startsWith('dist/') &&
      !f.endsWith('.d.ts') &&
      !f.includes('/fixtures/') &&
      !f.startsWith('tests/golden/'),
  );
const IMPORT =
  /(?:^|[^\w.$])(?:import|export)\s[^'"`;]*?\sfrom\s*['"]([^'"]+)['"]|(?:^|[^\w.$])import\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/gm;

/** The repository-relative file `spec` names from `from`, or undefined for a package or a missing file. */
function resolveImport(from, spec) {
  let target;
  if (spec.startsWith('./') || spec.startsWith('../')) target = path.posix.join(path.posix.dirname(from), spec);
  else if (spec.startsWith('/')) target = spec.slice(1);
  else return undefined;
  target = path.posix.normalize(target);
  for (const candidate of [target, target.replace(/\.js$/, '.ts')]) {
    if (fs.existsSync(path.join(repoRoot, candidate)) && fs.statSync(path.join(repoRoot, candidate)).isFile())
      return candidate;
  }
  return undefined;
}

const graph = new Map();
for (const file of files) {
  // Comments out first: they quote imports (`import { serve } from './scripts/serve.mjs'`) as examples.
  const source = fs
    .readFileSync(path.join(repoRoot, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '');
  const edges = new Set();
  for (const m of source.matchAll(IMPORT)) {
    const target = resolveImport(file, m[1] ?? m[2] ?? m[3]);
    if (target && target !== file) edges.add(target);
  }
  graph.set(file, [...edges]);
}

test('the walk sees the imports it should (a check of the check)', () => {
  assert.ok(graph.get('tests/js/helpers.mjs').includes('scripts/lib/reference.mjs'));
  assert.ok(graph.get('web/demo/model.js').includes('scripts/lib/prng.mjs'));
  assert.ok(graph.get('web/src/index.ts').length > 0);
});

test('runtime code (models/, web/, examples/) imports neither bench/ nor tests/', () => {
  const bad = [...graph].flatMap(([file, edges]) =>
    /^(models|web|examples)\//.test(file)
      ? edges.filter((e) => /^(bench|tests)\//.test(e)).map((e) => `${file} -> ${e}`)
      : [],
  );
  assert.deepEqual(bad, []);
});

test('bench/ and scripts/ do not import tests/; scripts/lib/ does not import bench/ either', () => {
  const bad = [...graph].flatMap(([file, edges]) =>
    edges
      .filter(
        (e) =>
          (/^(bench|scripts)\//.test(file) && e.startsWith('tests/')) ||
          (file.startsWith('scripts/lib/') && e.startsWith('bench/')),
      )
      .map((e) => `${file} -> ${e}`),
  );
  assert.deepEqual(bad, []);
});

test('no import cycles', () => {
  const state = new Map(); // file -> 'open' while on the stack, 'done' after
  const cycles = [];
  const stack = [];
  const visit = (file) => {
    state.set(file, 'open');
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') cycles.push([...stack.slice(stack.indexOf(next)), next].join(' -> '));
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  assert.deepEqual(cycles, []);
});
