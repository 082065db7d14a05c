// What the interleaved jobs' runners share (bench/lib/jobs-run.mjs and the jobs-*.mjs contestant modules):
// the built package's URL, the output check against plain JS, a failed contestant's record and the
// last-level-cache eviction before a timed step. Node only.
import { compareRows } from '../../scripts/lib/reference.mjs';
import { touchedMemory, bandwidthReader } from './bandwidth.mjs';
import { lastLevelCacheBytes } from './env.mjs';
import { evictionBytes } from './jobs.mjs';

/** The built package (dist/index.js), which every contestant imports. */
export const distUrl = new URL('../../dist/index.js', import.meta.url).href;

/** A contestant's check: its rows of `got` against plain JS's `want` (D columns), as the report shows it. */
export function checkSummary(got, want, rows, D) {
  const c = compareRows(got, want, rows, D);
  return { ok: c.ok, rows: rows.length, maxAbsErr: c.maxAbsErr, badCount: c.badCount, worst: c.worst };
}

/** A contestant left out of the rounds: its name and the first 3 lines of what went wrong. */
export function failure(name, error) {
  return {
    name,
    error: String(error?.stack ?? error)
      .split('\n')
      .slice(0, 3)
      .join(' | '),
  };
}

/**
 * An untimed streaming read over evictionBytes() of this machine's last-level cache, run before every timed
 * step so each step reads its K/V from DRAM.
 */
export function evictor() {
  const { memory, pages } = touchedMemory(evictionBytes(lastLevelCacheBytes()));
  const read = bandwidthReader(memory, pages);
  const end = pages * 65536;
  const sink = new Int32Array(1);
  return () => {
    sink[0] += read(0, end);
  };
}
