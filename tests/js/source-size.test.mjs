// The house rule on web/src (the TypeScript layer): no file over 500 lines, no function over 80, counted
// after prettier (printWidth 120). A function is anything with a body: declarations, methods, accessors,
// constructors, arrow functions and function expressions, each counted from its first to its last line.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { repoRoot } from './helpers.mjs';

const MAX_FILE_LINES = 500;
const MAX_FUNCTION_LINES = 80;

function sources(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return sources(file);
    return file.endsWith('.ts') ? [file] : [];
  });
}

/** [name, first line, lines] of every function with a body in `text`. */
export function functionLengths(file, text) {
  const sourceFile = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const lineOf = (position) => sourceFile.getLineAndCharacterOfPosition(position).line;
  const found = [];
  const visit = (node) => {
    if (ts.isFunctionLike(node) && node.body) {
      const first = lineOf(node.getStart(sourceFile));
      found.push([node.name?.getText(sourceFile) ?? '(anonymous)', first + 1, lineOf(node.end) - first + 1]);
    }
    ts.forEachChild(node, visit);
  };
  visit(sourceFile);
  return found;
}

test(`web/src: every file at most ${MAX_FILE_LINES} lines, every function at most ${MAX_FUNCTION_LINES}`, () => {
  const files = sources(path.join(repoRoot, 'web/src'));
  assert.ok(files.length > 20, `found only ${files.length} files under web/src`);
  const over = [];
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const relative = path.relative(repoRoot, file);
    const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    if (lines > MAX_FILE_LINES) over.push(`${relative}: ${lines} lines`);
    for (const [name, line, length] of functionLengths(file, text)) {
      if (length > MAX_FUNCTION_LINES) over.push(`${relative}:${line} ${name}: ${length} lines`);
    }
  }
  assert.deepEqual(over, [], `split these by concern:\n${over.join('\n')}`);
});

test('the function counter counts a function from its first to its last line, nested ones too', () => {
  const body = Array.from({ length: 79 }, (_, i) => `  const x${i} = () => ${i};`).join('\n');
  const found = functionLengths('x.ts', `function outer() {\n${body}\n}\nclass C {\n  m() {\n    return 1;\n  }\n}\n`);
  assert.deepEqual(found[0], ['outer', 1, 81]);
  assert.deepEqual(found[1], ['(anonymous)', 2, 1]); // the arrow function assigned to x0
  assert.deepEqual(found.at(-1), ['m', 83, 3]);
});
