// tiny-llama's continuations of one prompt over a shared prefix (models/lib/samples.mjs; docs/spec.md 5.2,
// 5.4): N samples give, seed for seed, the tokens each gives alone in a session of its own (sampled and
// greedy, float32 and float16 caches); beam search with cache.reorder keeps the beams a search without
// prefix or reorder keeps (every beam recomputed from scratch each step), token for token and score for
// score within float32 rounding; the prompt is held once; examples/generate.mjs --samples and --beams.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createMHA } from '../../dist/index.js';
import { encodeBytes, generate } from '../../models/lib/generate.mjs';
import { beamSearch, bestExtensions, generateSamples } from '../../models/lib/samples.mjs';
import { readLlama, tinyLlamaDir } from '../../models/tiny-llama/load-node.mjs';

const mha = await createMHA();
const model = readLlama();
const prompt = encodeBytes('And God said, Let there be ');

/** A prefix session of one sequence and N continuations over it, freed by the returned function. */
function sessionsOver(n, dtype, capacity = 64) {
  const prefix = model.createSession(mha, { dtype, capacity: 64 });
  const continuations = model.createSession(mha, { batch: n, dtype, capacity, prefix });
  return { sessions: { prefix, continuations }, free: () => [continuations, prefix].forEach((s) => s.free()) };
}

for (const dtype of ['float32', 'float16']) {
  test(`samples (${dtype}): each of 4 samples over the shared prompt is what its seed gives alone`, () => {
    const seeds = [1, 7, 42, 1234];
    const { sessions, free } = sessionsOver(seeds.length, dtype);
    try {
      const samples = generateSamples(sessions, prompt, 40, { seeds, temperature: 0.9, topK: 40 });
      seeds.forEach((seed, b) => {
        const alone = model.createSession(mha, { dtype });
        try {
          assert.deepEqual(
            samples[b],
            generate(alone, prompt, 40, { seed, temperature: 0.9, topK: 40 }),
            `seed ${seed}`,
          );
        } finally {
          alone.free();
        }
      });
      assert.ok(new Set(samples.map((s) => s.join())).size > 1, 'the seeds gave different samples');
      // The prompt is held once: the continuations' caches hold only their own tokens.
      assert.deepEqual(sessions.prefix.lengths, [prompt.length]);
      assert.deepEqual(sessions.continuations.lengths, [39, 39, 39, 39]);
    } finally {
      free();
    }
  });
}

test('samples, greedy: every sample is the argmax path alone', () => {
  const { sessions, free } = sessionsOver(3, 'float32');
  try {
    const samples = generateSamples(sessions, prompt, 30, { greedy: true });
    const alone = model.createSession(mha);
    const expected = generate(alone, prompt, 30, { greedy: true });
    alone.free();
    for (const s of samples) assert.deepEqual(s, expected);
  } finally {
    free();
  }
});

/** Beam search without a prefix or reorder: every beam run from scratch in a session of its own, each step. */
function beamSearchAlone(width, count) {
  const logitsOf = (tokens) => {
    const session = model.createSession(mha);
    try {
      return session.forward([...prompt, ...tokens]);
    } finally {
      session.free();
    }
  };
  let beams = bestExtensions([{ tokens: [], score: 0 }], [logitsOf([])], width).map((c) => ({
    tokens: [c.token],
    score: c.score,
  }));
  for (let i = 1; i < count; i++) {
    const chosen = bestExtensions(
      beams,
      beams.map((beam) => logitsOf(beam.tokens)),
      width,
    );
    beams = chosen.map((c) => ({ tokens: [...beams[c.parent].tokens, c.token], score: c.score }));
  }
  return beams;
}

test('beam search: 4 beams with reorder over the shared prompt keep the beams of a search from scratch', () => {
  const { sessions, free } = sessionsOver(4, 'float32');
  try {
    const beams = beamSearch(sessions, prompt, 12);
    const expected = beamSearchAlone(4, 12);
    assert.deepEqual(
      beams.map((b) => b.tokens),
      expected.map((b) => b.tokens),
    );
    beams.forEach((b, i) =>
      assert.ok(Math.abs(b.score - expected[i].score) < 1e-4, `${b.score} vs ${expected[i].score}`),
    );
    // Beams were kept twice and dropped along the way: some step reordered with a repeat.
    assert.ok(beams.some((b, i) => beams.some((c, j) => i !== j && b.tokens[0] === c.tokens[0])));
  } finally {
    free();
  }
});

test('examples/generate.mjs --samples and --beams: each sample is what --seed gives alone; the beams as beamSearch', () => {
  const script = new URL('../../examples/generate.mjs', import.meta.url).pathname;
  const run = (...args) =>
    JSON.parse(
      execFileSync(
        process.execPath,
        [script, '--model', tinyLlamaDir, '--prompt', 'And God said, ', '--tokens', '16', '--json', ...args],
        {
          encoding: 'utf8',
        },
      ),
    );
  const samples = run('--samples', '2', '--seed', '5');
  assert.deepEqual(
    samples.map((s) => s.seed),
    [5, 6],
  );
  samples.forEach((s) => assert.deepEqual(s.tokens, run('--seed', String(s.seed)).tokens, `seed ${s.seed}`));
  const beams = run('--beams', '3');
  assert.equal(beams.length, 3);
  assert.ok(beams[0].score >= beams[1].score && beams[1].score >= beams[2].score);
  const failed = spawnSync(process.execPath, [script, '--samples', '2', '--beams', '2'], { encoding: 'utf8' });
  assert.equal(failed.status, 2);
  assert.match(failed.stderr, /--samples, --beams: expected one of them, got both/);
});
