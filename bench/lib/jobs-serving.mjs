// The serving cache's jobs (issue #31), run by jobs-run.mjs: `ragged-decode`, one decode step of a batch
// of sequences of different lengths in one cache against the same steps in separate batch-1 caches and
// against the batch padded to the longest; and `cache-save-load`, save() and loadKVCache of a model's
// worth of float16 caches against a plain copy of the same bytes. Node only.
//
// Shapes: B sequences, L_b keys of sequence b after the step (the cache holds L_b - 1 before it), H query
// heads, Hkv KV heads, Dh head size.
import { makeInputs } from '../../scripts/lib/prng.mjs';
import { attentionRows } from '../../scripts/lib/reference.mjs';
import { checkSummary, distUrl, failure } from './jobs-common.mjs';
import { sliceRows } from '../../scripts/lib/golden-runner.mjs';
import { RAGGED, SAVE_LOAD, RAGGED_ONE, RAGGED_SEPARATE, RAGGED_PADDED, SAVE, LOAD, COPY } from './jobs.mjs';

/** Row t of sequence b of a (B, T, width) tensor. */
const rowOf = (x, T, width, b, t) => x.subarray((b * T + t) * width, (b * T + t + 1) * width);

/**
 * A cache of `lengths.length` sequences holding lengths[b] - 1 keys of k, v (B, T, Hkv·Dh) each; every
 * run() appends key lengths[b] - 1 of each (newTokens 1 each) and truncates back, so that each step
 * attends over lengths[b] keys. `first` picks the sequences of k, v it holds.
 */
function raggedStep(mha, k, v, q, { T, H, Hkv, Dh }, lengths, first = 0) {
  const B = lengths.length;
  const kvD = Hkv * Dh;
  const cache = mha.createKVCache({ batch: B, numKvHeads: Hkv, headDim: Dh, capacity: Math.max(...lengths) });
  const fill = lengths.map((L) => L - 1);
  const n = Math.max(...fill);
  const part = (x, width) => sliceRows(x.subarray(first * T * width, (first + B) * T * width), B, T, width, 0, n);
  // The fill's queries see only their own key (window [0, 0]): O(T) work instead of a causal prefill.
  cache.attend(part(k, kvD), part(k, kvD), part(v, kvD), { numHeads: Hkv, window: [0, 0], newTokens: fill });
  const gather = (x, width) => {
    const out = new Float32Array(B * width);
    lengths.forEach((L, b) => out.set(rowOf(x, T, width, first + b, L - 1), b * width));
    return out;
  };
  const [kNew, vNew] = [gather(k, kvD), gather(v, kvD)];
  const qStep = q.subarray(first * H * Dh, (first + B) * H * Dh);
  const out = new Float32Array(B * H * Dh);
  const options = { numHeads: H, out, newTokens: lengths.map(() => 1) };
  return {
    out,
    cache,
    run() {
      cache.attend(qStep, kNew, vNew, options);
      cache.truncate(fill);
    },
  };
}

export async function* raggedContestants(job, { seed, onPhase, disposers, evict }) {
  const s = RAGGED;
  const { T, H, Hkv, Dh, lengths } = s;
  const B = lengths.length;
  onPhase('inputs');
  // k, v (B, T, Hkv·Dh) with T = the longest; q (B, 1, H·Dh). Sequence b uses the first lengths[b] keys.
  const ref = { B, S: 1, T, D: H * Dh, H, Hkv, causal: true, queryOffset: T - 1 };
  const { q, k, v } = makeInputs(ref, seed);
  const rows = Int32Array.from({ length: B }, (_, b) => b);
  const want = attentionRows(
    q,
    k,
    v,
    { ...ref, kvLengths: Int32Array.from(lengths) },
    rows,
    new Float64Array(B * H * Dh),
    true,
  );
  const wantPadded = attentionRows(q, k, v, ref, rows, new Float64Array(B * H * Dh), true);
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  const bytesOf = (keys) => 2 * Hkv * Dh * keys * 4;
  const keys = lengths.reduce((a, L) => a + L, 0);
  const row = (totalKeys) => ({
    dtype: 'float32',
    threads: 1,
    bytes: bytesOf(totalKeys),
    flops: 4 * H * Dh * totalKeys,
  });
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    try {
      if (name === RAGGED_ONE) {
        const step = raggedStep(mha, k, v, q, s, lengths);
        yield {
          name,
          info: { build: mha.info.build, lengths: lengths.join(', ') },
          row: row(keys),
          before: evict,
          run: step.run,
          checkOutput: () => checkSummary(step.out, want, rows, H * Dh),
        };
      } else if (name === RAGGED_SEPARATE) {
        const steps = lengths.map((L, b) => raggedStep(mha, k, v, q, s, [L], b));
        const out = new Float32Array(B * H * Dh);
        yield {
          name,
          info: { build: mha.info.build, caches: B },
          row: row(keys),
          before: evict,
          run() {
            for (const step of steps) step.run();
          },
          checkOutput: () => {
            steps.forEach((step, b) => out.set(step.out, b * H * Dh));
            return checkSummary(out, want, rows, H * Dh);
          },
        };
      } else if (name === RAGGED_PADDED) {
        const step = raggedStep(
          mha,
          k,
          v,
          q,
          s,
          lengths.map(() => T),
        );
        yield {
          name,
          info: { build: mha.info.build, lengths: `${T} x ${B}` },
          row: row(B * T),
          before: evict,
          run: step.run,
          checkOutput: () => checkSummary(step.out, wantPadded, rows, H * Dh),
        };
      } else {
        throw new Error(`no such ragged contestant "${name}"`);
      }
    } catch (error) {
      yield failure(name, error);
    }
  }
}

/**
 * save() of SAVE_LOAD.caches float16 caches of SAVE_LOAD.tokens tokens, loadKVCache of their bytes, and
 * a plain copy of as many bytes (the memory-bandwidth ceiling of both), each a contestant.
 */
export async function* saveLoadContestants(job, { seed, onPhase, disposers }) {
  const { caches: count, tokens, Hkv, Dh } = SAVE_LOAD;
  onPhase('inputs');
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  const kvD = Hkv * Dh;
  const { q: k, k: v } = makeInputs({ B: 1, S: tokens, T: tokens, D: kvD, H: Hkv, Hkv }, seed);
  const caches = [];
  for (let i = 0; i < count; i++) {
    const cache = mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity: tokens, dtype: 'float16' });
    cache.attend(k, k, v, { numHeads: Hkv, window: [0, 0] });
    caches.push(cache);
  }
  const rawBytes = count * 2 * tokens * kvD * 2; // k and v, binary16
  let saved = caches.map((c) => c.save());
  const savedBytes = saved.reduce((a, b) => a + b.byteLength, 0);
  const info = {
    caches: count,
    tokens,
    Hkv,
    Dh,
    dtype: 'float16',
    rawBytes,
    savedBytes,
    bytesPerRaw: savedBytes / rawBytes,
  };
  const row = { bytes: rawBytes };
  const sameBytes = (a, b) => a.byteLength === b.byteLength && a.every((x, i) => x === b[i]);
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    if (name === SAVE) {
      yield {
        name,
        info,
        row,
        run() {
          saved = caches.map((c) => c.save());
        },
        checkOutput: () => ({ ok: saved.every((bytes, i) => sameBytes(bytes, caches[i].save())), rows: count }),
      };
    } else if (name === LOAD) {
      let loaded = [];
      yield {
        name,
        info,
        row,
        before() {
          loaded.forEach((c) => c.free());
          loaded = [];
        }, // untimed: the previous round's caches
        run() {
          loaded = saved.map((bytes) => mha.loadKVCache(bytes));
        },
        checkOutput: () => ({
          ok: loaded.length === count && loaded.every((c, i) => sameBytes(c.save(), saved[i])),
          rows: count,
        }),
      };
    } else if (name === COPY) {
      const target = saved.map((bytes) => new Uint8Array(bytes.byteLength));
      yield {
        name,
        info: { what: 'Uint8Array.set of the saved bytes, one copy per cache' },
        row,
        run() {
          target.forEach((t, i) => t.set(saved[i]));
        },
        checkOutput: () => ({ ok: sameBytes(target[0], saved[0]), rows: count }),
      };
    }
  }
}
