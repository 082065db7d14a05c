// examples/generate.mjs (the README quick start for tiny-gpt): its --json output is PyTorch's greedy bytes,
// and its text output reports the speed. TINY_GPT_DIR points it at another model folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { createMHA } from '../../dist/index.js';
import { generate } from '../../models/tiny-gpt/runner.mjs';
import { kvCacheBackend } from '../../models/tiny-gpt/attention-backends.mjs';
import { readTinyGPT, readTinyGPTGolden, tinyGptDir } from '../../models/tiny-gpt/load-node.mjs';
import { repoRoot } from './helpers.mjs';

const script = path.join(repoRoot, 'examples/generate.mjs');
const golden = await readTinyGPTGolden(process.env.TINY_GPT_DIR ?? tinyGptDir);
const run = (...args) => execFileSync(process.execPath, [script, ...args], { encoding: 'utf8' });

test("generate.mjs --greedy --json prints PyTorch's greedy bytes and their text", () => {
  const g = golden.generations[0];
  const result = JSON.parse(run('--prompt', g.prompt, '--tokens', String(golden.generatedBytes), '--greedy', '--json'));
  assert.deepEqual(Object.keys(result).sort(), ['text', 'tokens']);
  assert.deepEqual(result.tokens, g.f32.tokens);
  assert.equal(result.text, new TextDecoder().decode(Uint8Array.from(g.f32.tokens)));
});

test('generate.mjs prints the prompt, the text and tokens/s for the whole model and for attention alone', () => {
  const stdout = run('--prompt', 'And God said, ', '--tokens', '40', '--seed', '3');
  assert.ok(stdout.startsWith('And God said, '), stdout);
  assert.match(stdout, /generation: 39 steps, \d+ tokens\/s for the whole model, \d+ tokens\/s for attention alone/);
  const sampled = JSON.parse(run('--prompt', 'And God said, ', '--tokens', '40', '--seed', '3', '--json'));
  assert.ok(stdout.includes(sampled.text), 'the same seed gives the same text with and without --json');
});

test("generate.mjs runs past the model's context (it drops the older half and prefills again)", () => {
  const result = JSON.parse(run('--prompt', 'And ', '--tokens', '300', '--json', '--seed', '5'));
  assert.equal(result.tokens.length, 300);
});

test("generate.mjs --cache f16: PyTorch's f16 greedy bytes with an f16 KV cache", () => {
  const g = golden.generations[1];
  const args = [
    script,
    '--prompt',
    g.prompt,
    '--tokens',
    String(golden.generatedBytes),
    '--greedy',
    '--json',
    '--cache',
    'f16',
  ];
  const child = spawnSync(process.execPath, args, { encoding: 'utf8' });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout).tokens, g.f16.tokens);
});

test('generate.mjs --cache bf16, int8, int4: the greedy bytes of the runner on a cache of that dtype', async () => {
  const mha = await createMHA();
  const model = readTinyGPT(process.env.TINY_GPT_DIR ?? tinyGptDir);
  const prompt = [...new TextEncoder().encode('And God said, ')];
  try {
    for (const [name, dtype] of [
      ['bf16', 'bfloat16'],
      ['int8', 'int8'],
      ['int4', 'int4'],
    ]) {
      const session = model.createSession(kvCacheBackend(mha, { dtype }));
      const want = generate(session, prompt, 24, { greedy: true });
      session.free();
      const got = JSON.parse(
        run('--prompt', 'And God said, ', '--tokens', '24', '--greedy', '--json', '--cache', name),
      );
      assert.deepEqual(got.tokens, [...want], name);
    }
  } finally {
    mha.dispose();
  }
});

test('generate.mjs rejects bad arguments with a message naming them', () => {
  for (const [args, message] of [
    [['--tokens', '0'], /--tokens: expected a positive integer, got 0/],
    [['--cache', 'f8'], /--cache: expected f32, f16, bf16, int8, int4, got f8/],
    [['--prompt', ''], /--prompt: expected at least one character/],
  ]) {
    const child = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
    assert.equal(child.status, 2);
    assert.match(child.stderr, message);
  }
});
