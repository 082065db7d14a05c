// tokens/s of tiny-gpt in headless Chromium, in the demo's Worker (web/demo/model-worker.js): the whole
// model and attention alone, per decode step, with an f32 and an f16 KV cache interleaved round by round.
// Prints the median and range of each. Assumes dist/ is built.
//
//   node models/tiny-gpt/tools/bench-chromium.mjs [--rounds 9] [--tokens 200]
import { parseArgs } from 'node:util';
import { launchChromium } from '../../../scripts/lib/chromium.mjs';
import { serve } from '../../../scripts/serve.mjs';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '9' }, tokens: { type: 'string', default: '200' } },
});
const rounds = Number(values.rounds),
  count = Number(values.tokens);
const prompt = [...new TextEncoder().encode('And the king sent messengers unto the city, saying, ')];
if (!Number.isInteger(rounds) || rounds < 1)
  throw new RangeError(`--rounds: expected a positive integer, got ${values.rounds}`);
if (!Number.isInteger(count) || count < 2 || prompt.length + count > 256)
  throw new RangeError(`--tokens: expected an integer in [2, ${256 - prompt.length}], got ${values.tokens}`);

const server = await serve({ port: 0 });
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  await page.goto(new URL('models/tiny-gpt/config.json', server.url).href);
  const { samples, version } = await page.evaluate(
    ({ prompt, count, rounds }) =>
      new Promise((resolve, reject) => {
        const worker = new Worker('/web/demo/model-worker.js', { type: 'module' });
        let version;
        worker.onerror = (e) => reject(new Error(e.message));
        worker.onmessage = ({ data }) => {
          if (data.type === 'loaded') {
            version = `${data.info.version} (${data.info.build})`;
            worker.postMessage({ type: 'bench', prompt, count, rounds });
          } else if (data.type === 'bench') resolve({ samples: data.samples, version });
          else if (data.type === 'error') reject(new Error(data.message));
        };
        worker.postMessage({ type: 'load' });
      }),
    { prompt, count, rounds },
  );
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const line = (xs) => `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;
  console.log(
    `Chromium ${browser.version()}, mha-wasm ${version}; prompt ${prompt.length} bytes, ${count - 1} decode steps, ${rounds} rounds, f32/f16 interleaved`,
  );
  console.log('| KV cache | whole model, tokens/s | attention alone, tokens/s | attention share |');
  console.log('|---|---|---|---|');
  for (const dtype of ['float32', 'float16']) {
    const s = samples[dtype];
    console.log(
      `| ${dtype} | ${line(s.map((x) => x.model))} | ${line(s.map((x) => x.attention))} | ${(100 * median(s.map((x) => x.model / x.attention))).toFixed(1)} % |`,
    );
  }
  const ratio = (key) => samples.float16.map((s, i) => s[key] / samples.float32[i][key]);
  const fmt = (xs) => `${median(xs).toFixed(3)} (${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)})`;
  console.log(
    `f16 / f32 tokens/s, per round: whole model ${fmt(ratio('model'))}, attention alone ${fmt(ratio('attention'))}`,
  );
} finally {
  await browser.close();
  await server.close();
}
