// The model job of the serving group (docs/spec.md 5.2), run by jobs-run.mjs: tiny-llama drawing 4 samples
// of one prompt over the prompt held once (models/lib/samples.mjs) against the same 4 samples drawn one
// after the other, each in a session of its own. Node only, 1 thread; the whole model (its matrix products
// in plain JS), not attention alone.
import { encodeBytes, generate } from '../../models/lib/generate.mjs';
import { generateSamples } from '../../models/lib/samples.mjs';
import { readLlama } from '../../models/tiny-llama/load-node.mjs';
import { SAMPLES_SHARED, SAMPLES_SEPARATE, SAMPLES_SHAPE } from './jobs.mjs';
import { distUrl } from './jobs-common.mjs';

export async function* samplesContestants(job, { onPhase, disposers }) {
  const { samples, tokens, prompt: text } = SAMPLES_SHAPE;
  onPhase('model');
  const { createMHA } = await import(distUrl);
  const mha = await createMHA({ threads: 1 });
  disposers.push(() => mha.dispose());
  const model = readLlama();
  const prompt = encodeBytes(text);
  const seeds = Array.from({ length: samples }, (_, b) => b + 1);
  const expected = seeds.map((seed) => {
    const session = model.createSession(mha);
    const out = generate(session, prompt, tokens, { seed });
    session.free();
    return out;
  });
  const row = { dtype: 'float32', threads: 1, tokens: samples * tokens };
  for (const name of job.contestants) {
    onPhase(`setup ${name}`);
    let got = [];
    const run =
      name === SAMPLES_SHARED
        ? () => {
            const prefix = model.createSession(mha);
            const continuations = model.createSession(mha, { batch: samples, capacity: tokens, prefix });
            got = generateSamples({ prefix, continuations }, prompt, tokens, { seeds });
            continuations.free();
            prefix.free();
          }
        : () => {
            got = seeds.map((seed) => {
              const session = model.createSession(mha);
              const out = generate(session, prompt, tokens, { seed });
              session.free();
              return out;
            });
          };
    yield {
      name,
      info: { build: mha.info.build, samples, tokens, promptTokens: prompt.length },
      row,
      run,
      checkOutput: () => ({ ok: JSON.stringify(got) === JSON.stringify(expected), rows: samples, maxAbsErr: 0 }),
    };
  }
}
