// The project's one seeded PRNG (scripts/lib/prng.mjs) pinned to the sequences its users were built on: the
// tiny-gpt runner's sampling draws mulberry32 uniforms, the bench and tests fillNormal's normals, and the
// demo's seeded pictures normalSampler's. The expected values were printed by the copies these replaced
// (runner.mjs seededRandom, web/demo/model.js rng + gaussian at 7bedca1), so a change of a single bit fails.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mulberry32, normalSampler, randomNormal } from './helpers.mjs';
import { randomQKV } from '../../web/demo/model.js';

const take = (next, n) => Array.from({ length: n }, next);

test('mulberry32(1): the uniforms the tiny-gpt runner samples with', () => {
  assert.deepEqual(take(mulberry32(1), 3), [0.6270739405881613, 0.002735721180215478, 0.5274470399599522]);
});

test('randomNormal: the float32 normals of the tests and the bench', () => {
  assert.deepEqual(
    [...randomNormal(3, mulberry32(42))],
    [-0.9561622142791748, 0.32207024097442627, -0.27302610874176025],
  );
});

test('normalSampler: the demo stream, its spare carried from one array into the next', () => {
  assert.deepEqual(
    take(normalSampler(mulberry32(42)), 3),
    [-1.2848381576290195, 0.43278026787558976, -0.9453528099747296],
  );
  // (B, S, D) = (1, 1, 1): q takes the cosine half, k the kept sine half, v a fresh pair.
  const { q, k, v } = randomQKV(1, 1, 1, 42);
  assert.deepEqual([q[0], k[0], v[0]], [-1.2848381996154785, 0.43278026580810547, -0.9453527927398682]);
});
