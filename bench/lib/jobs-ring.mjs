// The ring cache job (docs/spec.md 5.5), run by jobs-run.mjs: one decode step of a sliding-window layer
// whose ring of C tokens has seen 16 C of them (its stored tokens two runs of slots), against a plain cache
// holding C tokens with the same window. Node only, 1 thread, the last-level cache evicted before every step.
//
// Shapes: C = capacity = window + 1 keys seen by the step, H query heads, Hkv KV heads, Dh head size.
import { makeInputs } from '../../scripts/lib/prng.mjs';
import { attentionRows } from '../../scripts/lib/reference.mjs';
import { sliceRows } from '../../scripts/lib/golden-runner.mjs';
import { RING_CACHE, RING_SHAPE } from './jobs.mjs';
import { checkSummary, distUrl } from './jobs-common.mjs';

/**
 * A step over the C keys of k, v (1, C, Hkv·Dh): the cache holds the first C - 1 (after `before` tokens of
 * filler for the ring), the step appends the last and truncates back, so every run does the same work.
 */
function ringStep(mha, s, { q, k, v }, ring) {
  const { C, H, Hkv, Dh, seen } = s;
  const kvD = Hkv * Dh;
  const window = [C - 1, 0];
  const cache = mha.createKVCache({ batch: 1, numKvHeads: Hkv, headDim: Dh, capacity: C, ring });
  // The fill's queries see only their own key: O(tokens) work. A ring first takes seen - C tokens of
  // filler, in chunks of C (W + n <= C with W = 0).
  const fillOptions = { numHeads: Hkv, window: [0, 0] };
  for (let done = 0; ring && done < seen - C; done += C) cache.attend(k, k, v, fillOptions);
  const part = (x) => sliceRows(x, 1, C, kvD, 0, C - 1);
  cache.attend(part(k), part(k), part(v), fillOptions);
  const last = (x) => sliceRows(x, 1, C, kvD, C - 1, 1);
  const [kNew, vNew] = [last(k), last(v)];
  const out = new Float32Array(H * Dh);
  const length = cache.length;
  const options = { numHeads: H, out, window };
  return {
    cache,
    out,
    run() {
      cache.attend(q, kNew, vNew, options);
      cache.truncate(length);
    },
  };
}

export async function* ringContestants(job, { seed, onPhase, disposers, evict }) {
  const s = RING_SHAPE;
  const { C, H, Hkv, Dh } = s;
  onPhase('inputs');
  const ref = { B: 1, S: 1, T: C, D: H * Dh, H, Hkv, causal: true, queryOffset: C - 1 };
  const inputs = makeInputs(ref, seed);
  const rows = Int32Array.of(0);
  const want = attentionRows(inputs.q, inputs.k, inputs.v, ref, rows, new Float64Array(H * Dh), true);
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    const step = ringStep(mha, s, inputs, name === RING_CACHE);
    const { cache } = step;
    yield {
      name,
      info: { build: mha.info.build, lengths: cache.length, stored: cache.stored[0], bytesHeld: cache.bytes },
      row: { dtype: 'float32', threads: 1, bytes: 2 * Hkv * Dh * C * 4, flops: 4 * H * Dh * C },
      before: evict,
      run: step.run,
      checkOutput: () => checkSummary(step.out, want, rows, H * Dh),
    };
  }
}
