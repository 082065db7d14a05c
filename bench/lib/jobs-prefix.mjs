// The shared-prefix jobs (docs/spec.md 5.2, 5.4), run by jobs-run.mjs: one decode step of 4 sequences that
// continue one long prompt, three ways: over a batch-1 prefix cache (`prefix`), as one sequence over the
// same number of keys (what the prefix's single read costs), and as 4 sequences that each store the prompt;
// and beam search's reorder of those 4 sequences against their step. Node only, 1 thread, the last-level
// cache evicted before every run.
//
// Shapes: B sequences, Lp prefix tokens, each sequence's own tokens S_own (after the step), H query heads,
// Hkv KV heads, Dh head size; T = Lp + S_own keys per sequence.
import { makeInputs } from '../../scripts/lib/prng.mjs';
import { roundToFloat16 } from '../../scripts/lib/float16.mjs';
import { attentionRows } from '../../scripts/lib/reference.mjs';
import { checkSummary, distUrl, failure } from './jobs-common.mjs';
import { sliceRows } from '../../scripts/lib/golden-runner.mjs';
import { PREFIX_SHARED, PREFIX_ONE, PREFIX_COPIES, REORDER, REORDER_STEP } from './jobs.mjs';

/**
 * k, v (B, T, Hkv·Dh) whose first Lp rows are the same in every sequence (the prompt), q (B, 1, H·Dh), and
 * the float64 answer of each sequence's last query over its T keys (as a float16 cache stores them, for
 * float16).
 */
function prefixInputs(shape, seed) {
  const { B, Lp, own, H, Hkv, Dh, dtype } = shape;
  const T = Lp + own;
  const kvD = Hkv * Dh;
  const ref = { B, S: 1, T, D: H * Dh, H, Hkv, causal: true, queryOffset: T - 1 };
  const { q, k, v } = makeInputs(ref, seed);
  for (const x of [k, v]) {
    for (let b = 1; b < B; b++) x.copyWithin(b * T * kvD, 0, Lp * kvD);
    if (dtype === 'float16') x.forEach((value, i) => (x[i] = roundToFloat16(value)));
  }
  const rows = Int32Array.from({ length: B }, (_, b) => b);
  const want = attentionRows(q, k, v, ref, rows, new Float64Array(B * H * Dh), true);
  return { q, k, v, T, kvD, rows, want };
}

/**
 * Fills `cache` with rows [from, to) of every sequence of k, v (the queries see only their own key:
 * O(tokens) work), over `prefix` when given.
 */
function fill(cache, k, v, T, kvD, from, to, Hkv, prefix) {
  const B = cache.lengths.length;
  const part = (x) => sliceRows(x, B, T, kvD, from, to - from);
  cache.attend(part(k), part(k), part(v), { numHeads: Hkv, window: [0, 0], ...(prefix ? { prefix } : {}) });
}

/** One step of every sequence: appends key T - 1 of each, attends, truncates back. */
function stepOf(cache, q, k, v, T, kvD, H, Dh, prefix) {
  const B = cache.lengths.length;
  const last = (x) => sliceRows(x, B, T, kvD, T - 1, 1);
  const [kNew, vNew] = [last(k), last(v)];
  const out = new Float32Array(B * H * Dh);
  const before = cache.lengths;
  const options = { numHeads: H, out, ...(prefix ? { prefix } : {}) };
  return {
    out,
    run() {
      cache.attend(q, kNew, vNew, options);
      cache.truncate(before);
    },
  };
}

/** A prefix job's inputs and answer (prefixInputs) and an instance of 1 thread, disposed with the job. */
async function prefixSetup(job, { seed, onPhase, disposers }) {
  onPhase('inputs');
  const inputs = prefixInputs(job.prefix, seed);
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  return { ...inputs, mha };
}

export async function* prefixContestants(job, context) {
  const { B, Lp, own, H, Hkv, Dh, dtype } = job.prefix;
  const { onPhase, evict } = context;
  const { q, k, v, T, kvD, rows, want, mha } = await prefixSetup(job, context);
  const elementBytes = dtype === 'float16' ? 2 : 4;
  const row = (keysRead, queryKeys) => ({
    dtype,
    threads: 1,
    bytes: 2 * kvD * keysRead * elementBytes,
    flops: 4 * H * Dh * queryKeys,
  });
  const config = { numKvHeads: Hkv, headDim: Dh, dtype };
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    try {
      let cache;
      let step;
      let info;
      let counted;
      if (name === PREFIX_SHARED) {
        const prefix = mha.createKVCache({ ...config, batch: 1, capacity: Lp });
        fill(prefix, k, v, T, kvD, 0, Lp, Hkv);
        cache = mha.createKVCache({ ...config, batch: B, capacity: own });
        fill(cache, k, v, T, kvD, Lp, T - 1, Hkv, prefix);
        step = stepOf(cache, q, k, v, T, kvD, H, Dh, prefix);
        info = { bytesHeld: prefix.bytes + cache.bytes, prefixTokens: Lp, ownTokens: own, sequences: B };
        counted = row(Lp + B * own, B * T);
      } else if (name === PREFIX_ONE) {
        cache = mha.createKVCache({ ...config, batch: 1, capacity: T });
        fill(cache, k, v, T, kvD, 0, T - 1, Hkv);
        step = stepOf(cache, q.subarray(0, H * Dh), k.subarray(0, T * kvD), v.subarray(0, T * kvD), T, kvD, H, Dh);
        info = { bytesHeld: cache.bytes, tokens: T, sequences: 1 };
        counted = row(T, T);
      } else if (name === PREFIX_COPIES) {
        cache = mha.createKVCache({ ...config, batch: B, capacity: T });
        fill(cache, k, v, T, kvD, 0, T - 1, Hkv);
        step = stepOf(cache, q, k, v, T, kvD, H, Dh);
        info = { bytesHeld: cache.bytes, tokens: T, sequences: B };
        counted = row(B * T, B * T);
      } else {
        throw new Error(`no such prefix contestant "${name}"`);
      }
      const checked = name === PREFIX_ONE ? rows.subarray(0, 1) : rows;
      yield {
        name,
        info: { build: mha.info.build, dtype, ...info },
        row: counted,
        before: evict,
        run: step.run,
        checkOutput: () => checkSummary(step.out, want, checked, H * Dh),
      };
    } catch (error) {
      yield failure(name, error);
    }
  }
}

/**
 * Beam search's reorder against the step it follows: the 4 sequences of a prefix job, one step over the
 * prefix, and a reorder that moves every sequence (two swaps, through the cycle buffer) each run.
 */
export async function* reorderContestants(job, context) {
  const { B, Lp, own, H, Hkv, Dh, dtype } = job.prefix;
  const { onPhase, evict } = context;
  const { q, k, v, T, kvD, rows, want, mha } = await prefixSetup(job, context);
  const config = { numKvHeads: Hkv, headDim: Dh, dtype };
  const prefix = mha.createKVCache({ ...config, batch: 1, capacity: Lp });
  fill(prefix, k, v, T, kvD, 0, Lp, Hkv);
  const cache = mha.createKVCache({ ...config, batch: B, capacity: own });
  fill(cache, k, v, T, kvD, Lp, T - 1, Hkv, prefix);
  const step = stepOf(cache, q, k, v, T, kvD, H, Dh, prefix);
  const elementBytes = dtype === 'float16' ? 2 : 4;
  const moved = B * (own - 1) * 2 * kvD * elementBytes; // every sequence's own tokens
  const info = {
    build: mha.info.build,
    dtype,
    sequences: B,
    ownTokens: own - 1,
    bytesHeld: prefix.bytes + cache.bytes,
  };
  const swaps = Array.from({ length: B }, (_, b) => b ^ 1);
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    if (name === REORDER_STEP) {
      yield {
        name,
        info,
        row: { dtype, threads: 1, bytes: 2 * kvD * (Lp + B * own) * elementBytes, flops: 4 * H * Dh * B * T },
        before: evict,
        run: step.run,
        checkOutput: () => checkSummary(step.out, want, rows, H * Dh),
      };
    } else if (name === REORDER) {
      let swapped = false;
      yield {
        name,
        info,
        row: { dtype, threads: 1, bytes: 2 * moved },
        before: evict,
        run() {
          cache.reorder(swaps);
          swapped = !swapped;
        },
        // Swapped back (an even number of runs) the step gives its answer again.
        checkOutput: () => {
          if (swapped) cache.reorder(swaps);
          swapped = false;
          step.run();
          return checkSummary(step.out, want, rows, H * Dh);
        },
      };
    } else {
      throw new Error(`no such reorder contestant "${name}"`);
    }
  }
}
