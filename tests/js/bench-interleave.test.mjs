// The bench's interleaving protocol (bench/lib/interleave.mjs), with self-timed contestants: each run()
// returns its own "time", so the order of the rounds and the per-round ratios are exact, and no timing
// of this machine is asserted. Also the job table's ratios name contestants that exist (bench/lib/jobs.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { interleave, roundRatio } from '../../bench/lib/interleave.mjs';
import { JOBS, meets } from '../../bench/lib/jobs.mjs';

function selfTimed(name, times, log) {
  let call = 0;
  return {
    name,
    run: () => {
      log.push(name);
      return times[Math.min(call++, times.length - 1)];
    },
  };
}

test('rounds alternate forward and backward, one sample per contestant per round', async () => {
  const log = [];
  const a = selfTimed('A', [5000], log); // over 2 s: no warm-up, one call per sample
  const b = selfTimed('B', [5000], log);
  const c = selfTimed('C', [5000], log);
  const r = await interleave([a, b, c], { budgetMs: 0, minRounds: 4, maxRounds: 4, sampleMs: 1 });
  assert.equal(r.rounds, 4);
  // First calls A, B, C (their warm-up is skipped), then the rounds: ABC, CBA, ABC, CBA.
  assert.deepEqual(log.join(''), 'ABC' + 'ABC' + 'CBA' + 'ABC' + 'CBA');
  for (const x of r.contestants) assert.equal(x.roundMs.length, 4);
});

test('roundRatio takes the ratio per round: median and range over rounds', async () => {
  const log = [];
  // After the first call: A's rounds take 10, 10, 10, 10, 10 ms; B's 20, 30, 40, 50, 60 ms.
  const a = selfTimed('A', [5000, 10], log);
  const b = selfTimed('B', [5000, 20, 60, 30, 50, 40], log);
  const r = await interleave([a, b], { budgetMs: 0, minRounds: 5, maxRounds: 5, sampleMs: 1 });
  assert.deepEqual(r.contestants[1].roundMs, [20, 60, 30, 50, 40]);
  const speed = roundRatio(r, 'A', 'B');
  assert.deepEqual([speed.median, speed.min, speed.max, speed.rounds], [4, 2, 6, 5]);
  const time = roundRatio(r, 'B', 'A', { speed: false });
  assert.deepEqual([time.median, time.min, time.max], [4, 2, 6]);
  assert.throws(() => roundRatio(r, 'A', 'Z'), /no contestant "Z"/);
});

test('every job ratio names two of its contestants, and bounds are judged on the median', () => {
  for (const job of JOBS) {
    const names = job.contestants.map((c) => (typeof c === 'string' ? c : c.name));
    for (const ratio of job.ratios) {
      assert.ok(
        names.includes(ratio.a) && names.includes(ratio.b),
        `${job.name}: ${ratio.a} / ${ratio.b} not among ${names.join(', ')}`,
      );
    }
  }
  assert.equal(meets({ median: 1.7, atLeast: 1.8 }), false);
  assert.equal(meets({ median: 1.2, atMost: 1.25 }), true);
  assert.equal(meets({ median: 1.2 }), undefined);
});
