// The demo's modern-attention parts in headless Chromium, served as `npm start` serves it: the options panel
// (each control changes the maps; the weights the maps show are mha.attentionWeights' for the same options,
// computed here apart from the page's code), the stage view and the RoPE chart, the cache view (its dtypes are
// the package's; its bytes and its error are what Node computes against the float64 reference), and
// tiny-llama's heads (each row's largest weight is the reference's, over the keys the Node runner projects).
// No console errors and no request beyond the page's own origin. Screenshots at 1280 and 390 px go to
// test-results/demo-modern/. Assumes dist/ is built.
//
//   node --test tests/browser/demo-modern.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { createMHA } from '../../dist/index.js';
import { attention } from '../../scripts/lib/reference.mjs';
import { mulberry32, normalSampler } from '../../scripts/lib/prng.mjs';
import { encodeBytes } from '../../models/lib/generate.mjs';
import { generate } from '../../models/tiny-llama/runner.mjs';
import { readLlama } from '../../models/tiny-llama/load-node.mjs';
import { canvasStats, chromiumAndServer } from './suites.mjs';

const SHOTS = fileURLToPath(new URL('../../test-results/demo-modern/', import.meta.url));
const harness = chromiumAndServer({ before, after });
before(() => mkdir(SHOTS, { recursive: true }));

/** The demo at `/`, with every console error, page error, failed response and foreign request recorded. */
async function openDemo(t, viewport = { width: 1280, height: 800 }) {
  const context = await harness.browser.newContext({ viewport });
  const page = await context.newPage();
  const problems = [];
  const origin = new URL(harness.server.url).origin;
  page.on('console', (m) => m.type() === 'error' && problems.push(`console.error: ${m.text()}`));
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('request', (r) => new URL(r.url()).origin !== origin && problems.push(`foreign request: ${r.url()}`));
  page.on('response', (r) => r.status() >= 400 && problems.push(`HTTP ${r.status()} for ${r.url()}`));
  t.after(() => context.close());
  await page.goto(harness.server.url);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 20_000 });
  await page.waitForSelector('#cache-view[data-state="ready"]', { timeout: 30_000 });
  return { page, problems };
}

/** Runs `action` and waits for the synthetic view's next render. */
async function change(page, action) {
  const before = await page.evaluate(() => Number(document.body.dataset.renders));
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.renders) > n, before, { timeout: 10_000 });
}

/** Runs `action` and waits for the cache view's next render. */
async function changeCache(page, action) {
  const el = '#cache-view';
  const before = Number(await page.getAttribute(el, 'data-renders'));
  await action();
  await page.waitForFunction((n) => Number(document.getElementById('cache-view').dataset.renders) > n, before, {
    timeout: 20_000,
  });
}

const mapImages = (page) => page.$$eval('#heatmaps canvas', (cs) => cs.map((c) => c.toDataURL()));

/** The tooltip text of cell (i, j) of head h, reached with the keyboard (i >= 1: the cursor starts at 0, 0). */
async function cellTooltip(page, h, i, j) {
  await page.focus(`#heatmaps canvas[data-head="${h}"]`);
  await page.keyboard.press('Escape');
  for (let n = 0; n < i; n++) await page.keyboard.press('ArrowDown');
  for (let n = 0; n < j; n++) await page.keyboard.press('ArrowRight');
  return page.textContent('#tooltip');
}

/** RGB at the center of cell (i, j) of heatmap h. */
const cellColor = (page, h, i, j) =>
  page.evaluate(
    ([head, row, col]) => {
      const c = document.querySelector(`#heatmaps canvas[data-head="${head}"]`);
      const k = c.width / parseFloat(c.style.width);
      const x = Math.round((+c.dataset.left + (col + 0.5) * +c.dataset.cell) * k);
      const y = Math.round((+c.dataset.top + (row + 0.5) * +c.dataset.cell) * k);
      return [...c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)];
    },
    [h, i, j],
  );
const isGrey = ([r, g, b]) => Math.abs(r - g) < 8 && Math.abs(g - b) < 8 && r < 240;

describe('the options panel', () => {
  test('each control changes the maps; the weights shown are mha.attentionWeights for the same options', async (t) => {
    const { page, problems } = await openDemo(t);
    let images = await mapImages(page);
    const steps = [
      ['numKvHeads 2 (GQA)', () => page.selectOption('#numKvHeads', '2')],
      ['causal', () => page.selectOption('#mask', 'causal')],
      ['query offset 3', () => page.fill('#queryOffset', '3')],
      ['window [2, ∞)', () => page.fill('#windowLeft', '2')],
      ['sink logit 1', () => page.fill('#sinks', '1')],
      ['softcap 2', () => page.fill('#softcap', '2')],
      ['ALiBi', () => page.check('#alibi')],
      ['RoPE', () => page.check('#rope')],
    ];
    for (const [name, apply] of steps) {
      await change(page, apply);
      const now = await mapImages(page);
      assert.ok(
        now.some((image, h) => image !== images[h]),
        `${name}: no map changed`,
      );
      images = now;
    }
    // Two groups of two heads, each framed as one KV head's.
    assert.deepEqual(await page.$$eval('#heatmaps figure', (fs) => fs.map((f) => f.dataset.kvHead)), [
      '0',
      '0',
      '1',
      '1',
    ]);
    // Causal from offset 3 and a window of 2 keys back: query 2 (position 5) sees keys 3..5 only.
    assert.ok(isGrey(await cellColor(page, 0, 2, 2)), 'key 2 is left of the window');
    assert.ok(!isGrey(await cellColor(page, 0, 2, 3)), 'key 3 is in the window');
    assert.ok(!isGrey(await cellColor(page, 0, 2, 5)), 'key 5 is the query’s own position');
    assert.ok(isGrey(await cellColor(page, 0, 2, 6)), 'key 6 is in the future');

    // The same weights computed here, from the library and the page's data module only.
    const expected = await page.evaluate(async () => {
      const { createMHA } = await import('/dist/index.js');
      const { sentenceQKV, tokenize } = await import('/web/demo/model.js');
      const mha = await createMHA();
      const lines = tokenize(document.getElementById('sentence').value);
      const { q, k } = sentenceQKV(lines, 64, 4);
      const S = 11;
      const D = 64;
      const Dh = 16;
      const qb = q.slice(0, S * D);
      const kv = new Float32Array(S * 2 * Dh); // KV head g = query head 2g's key slice
      for (let s = 0; s < S; s++)
        for (let g = 0; g < 2; g++) kv.set(k.subarray(s * D + 2 * g * Dh, s * D + (2 * g + 1) * Dh), (s * 2 + g) * Dh);
      const w = mha.attentionWeights(qb, kv, {
        batch: 1,
        seqLen: S,
        dModel: D,
        numHeads: 4,
        numKvHeads: 2,
        causal: true,
        queryOffset: 3,
        window: [2, Infinity],
        sinks: [1, 1, 1, 1],
        softcap: 2,
        alibiSlopes: [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8],
        rope: { ...mha.ropeTables({ rotaryDim: Dh, positions: 3 + S, theta: 10000 }) },
      });
      return Array.from(w);
    });
    const at = (h, i, j) => expected[(h * 11 + i) * 11 + j];
    for (const [h, i, j] of [
      [0, 1, 2],
      [1, 4, 5],
      [3, 7, 8],
      [2, 9, 10],
    ]) {
      const tip = await cellTooltip(page, h, i, j);
      const w = at(h, i, j);
      assert.match(tip, new RegExp(`weight ${w.toFixed(4).replace('.', '\\.')}`), `head ${h} (${i}, ${j}): ${tip}`);
    }
    // The sink column: the keyboard reaches it past the last key; it shows 1 − Σ of the row.
    const row = Array.from({ length: 11 }, (_, j) => at(1, 3, j));
    const sinkTip = await cellTooltip(page, 1, 3, 11);
    assert.match(sinkTip, new RegExp(`sink takes ${(1 - row.reduce((a, b) => a + b)).toFixed(4).replace('.', '\\.')}`));
    // The code panel's call, run as shown (random inputs): it takes these options and gives these shapes.
    const ran = await page.evaluate(async () => {
      const code = document.getElementById('code').textContent;
      const body = code.replace(/^import .*$/m, '').replace('const mha = await createMHA();', '');
      const { createMHA } = await import('/dist/index.js');
      const run = new Function('mha', `return (async () => { ${body}\n return [out.length, weights.length]; })();`);
      return run(await createMHA());
    });
    assert.deepEqual(ran, [2 * 11 * 64, 2 * 4 * 11 * 11]);
    assert.match(await page.textContent('#code'), /numKvHeads: 2, \/\/ k and v: \(batch, seqLen, 2 \* headDim\)/);
    await page.screenshot({ path: `${SHOTS}options-1280.png`, fullPage: false });
    assert.deepEqual(problems, []);
  });

  test('the stage view and the RoPE chart come from the same calls; bad values get an inline message', async (t) => {
    const { page, problems } = await openDemo(t);
    await change(page, () => page.selectOption('#mask', 'causal'));
    await change(page, () => page.fill('#softcap', '1'));
    await change(page, () => page.selectOption('#token', '4'));
    await change(page, () => page.selectOption('#stageHead', '2'));
    const column = (stage) =>
      page.$$eval(`#stages tbody tr[data-key] td[data-stage="${stage}"]`, (cells) => cells.map((c) => c.textContent));
    assert.deepEqual(await page.$$eval('#stages thead th[data-stage]', (hs) => hs.map((h) => h.dataset.stage)), [
      'scaled',
      'softcapped',
      'biased',
      'softmax',
    ]);
    const [scaled, capped, biasedText, softmax] = await Promise.all(
      ['scaled', 'softcapped', 'biased', 'softmax'].map(column),
    ).then((cols) => cols.map((c, i) => (i === 2 ? c : c.map(Number))));
    for (let j = 0; j < 11; j++) {
      // softcap 1: the softcapped score is tanh of the scaled one (to the 2 decimals shown)
      assert.ok(Math.abs(capped[j] - Math.tanh(scaled[j])) <= 0.011, `key ${j}: ${scaled[j]} -> ${capped[j]}`);
      if (j > 4) assert.equal(biasedText[j], '−∞', `key ${j} is in the future of query 4`);
      else assert.equal(Number(biasedText[j]), capped[j]);
    }
    const sum = softmax.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - 1) < 0.01, `the softmax row sums to ${sum}`);

    await change(page, () => page.check('#rope'));
    const label = await page.getAttribute('#rope-chart', 'aria-label');
    const [atZero, plain] = [/: (-?\d+\.\d+) at distance 0/, /; (-?\d+\.\d+) at every distance/].map((re) =>
      Number(re.exec(label)[1]),
    );
    assert.equal(atZero, plain, 'RoPE leaves the score of a token with itself at distance 0 unchanged');
    assert.ok((await canvasStats(page, '#rope-chart'))[0].colors > 3, 'the chart is drawn');

    for (const [field, value, message] of [
      ['#softcap', '-1', /Softcap must be a number above 0/],
      ['#windowLeft', '2.5', /Window, keys before must be a whole number/],
      ['#queryOffset', '99', /Query offset must be a whole number from 0 to 64/],
    ]) {
      await page.fill(field, value);
      await page.waitForFunction(
        (re) => new RegExp(re).test(document.getElementById('errors').textContent),
        message.source,
      );
      assert.equal(await page.getAttribute(field, 'aria-invalid'), 'true');
      await change(page, () => page.fill(field, ''));
    }
    assert.deepEqual(problems, []);
  });
});

/** What the cache view computes, here in Node: the seeded sequence, the cache of dtype, the reference. */
function nodeCacheRun(mha, dtype, N) {
  const normal = normalSampler(mulberry32(7));
  const make = (width, gain) => Float32Array.from({ length: N * width }, () => gain * normal());
  const q = make(128, 2);
  const k = make(64, 1);
  const v = make(64, 1);
  const cache = mha.createKVCache({ batch: 1, numKvHeads: 2, headDim: 32, capacity: N, dtype });
  const out = new Float32Array(N * 128);
  for (let t = 0; t < N; t++) {
    const row = (x, w) => x.subarray(t * w, (t + 1) * w);
    out.set(cache.attend(row(q, 128), row(k, 64), row(v, 64), { numHeads: 4 }), t * 128);
  }
  const bytes = cache.bytes;
  cache.free();
  const ref = attention(q, k, v, { B: 1, S: N, T: N, D: 128, H: 4, Hkv: 2, causal: true }, new Float64Array(N * 128));
  let error = 0;
  for (let i = 0; i < out.length; i++) error = Math.max(error, Math.abs(out[i] - ref[i]));
  return { bytes, error };
}

describe('the cache view', () => {
  test('dtypes from the package, bytes and context, error against float64, ring and shared prefix', async (t) => {
    const { page, problems } = await openDemo(t);
    const generated = await readFile(new URL('../../web/src/cache-dtypes.generated.ts', import.meta.url), 'utf8');
    const names = JSON.parse(/CACHE_DTYPE_NAMES = (\[[^\]]*\])/.exec(generated)[1].replaceAll("'", '"'));
    assert.deepEqual(await page.$$eval('#cache-dtype option', (os) => os.map((o) => o.value)), names);

    // The arithmetic control exists exactly when the package takes the option.
    const integer = await page.evaluate(async () => {
      const { createMHA } = await import('/dist/index.js');
      const mha = await createMHA();
      try {
        mha.createKVCache({ batch: 1, numKvHeads: 1, headDim: 32, capacity: 32, dtype: 'int8', arithmetic: 'integer' });
        return true;
      } catch {
        return false;
      }
    });
    await changeCache(page, () => page.selectOption('#cache-dtype', 'float32'));
    assert.equal(await page.isVisible('#cache-arithmetic-field'), false);
    await changeCache(page, () => page.selectOption('#cache-dtype', 'int8'));
    assert.equal(await page.isVisible('#cache-arithmetic-field'), integer);

    const mha = await createMHA();
    const N = 48;
    for (const dtype of ['float32', 'float16', 'int8']) {
      if ((await page.inputValue('#cache-dtype')) !== dtype)
        await changeCache(page, () => page.selectOption('#cache-dtype', dtype));
      const node = nodeCacheRun(mha, dtype, N);
      assert.equal(Number(await page.getAttribute('#cache-bytes-held', 'data-value')), node.bytes, `${dtype}: bytes`);
      const shown = Number(await page.getAttribute('#cache-out-error', 'data-value'));
      // The page's build may be another than Node's (relaxed SIMD): the same error up to float32 rounding.
      assert.ok(Math.abs(shown - node.error) <= 2e-6, `${dtype}: the page says ${shown}, Node ${node.error}`);
      if (dtype === 'float32') assert.ok(shown < 1e-5, `float32 error ${shown}`);
      else assert.ok(shown > 1e-5 && shown < 0.1, `${dtype} error ${shown}`);
      const weights = Number(await page.getAttribute('#cache-weights-error', 'data-value'));
      assert.ok(Number.isFinite(weights) && weights < 0.05, `${dtype}: weights error ${weights}`);
    }
    // Llama-3.2-1B in float32: 16 layers × 8 KV heads × (K and V) × 64 × 4 bytes = 64 KiB a token.
    const fits = await page.getAttribute('#cache-fit tr[data-dtype="float32"] td:nth-of-type(2)', 'data-tokens');
    assert.equal(Number(fits), Math.floor(mha.info.maxMemoryBytes / (16 * 8 * 2 * 64 * 4)));

    // The ring: window 6 keeps 7 tokens, the last 7 of 48, and gives what the full cache gives.
    assert.equal(await page.textContent('#ring-held'), '7: 41–47');
    assert.ok(Number(await page.getAttribute('#ring-difference', 'data-value')) < 1e-5);
    const ringPixels = await page.evaluate(() => {
      const c = document.getElementById('ring-map');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let orange = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] === 0xf9 && d[i + 1] === 0x73 && d[i + 2] === 0x16) orange++;
      return orange;
    });
    assert.ok(ringPixels > 0, 'the tokens written are drawn');
    const shared = Number(await page.getAttribute('#prefix-shared-bytes', 'data-value'));
    const copies = Number(await page.getAttribute('#prefix-copies-bytes', 'data-value'));
    assert.ok(shared < copies, `a shared prefix holds ${shared} bytes, copies ${copies}`);
    assert.ok(Number(await page.getAttribute('#prefix-difference', 'data-value')) < 1e-5);

    await page.fill('#cache-tokens', '500');
    await page.waitForFunction(() =>
      /Tokens to decode must be a whole number from 2 to 128/.test(document.getElementById('cache-errors').textContent),
    );
    await changeCache(page, () => page.fill('#cache-tokens', '48'));
    assert.equal(await page.isHidden('#cache-errors'), true);
    mha.dispose();
    assert.deepEqual(problems, []);
  });
});

describe("tiny-llama's heads", () => {
  test('every layer × head row for the byte generated, grouped by KV head, its largest weight the reference’s', async (t) => {
    const { page, problems } = await openDemo(t);
    await page.selectOption('#real-model-picker', 'tiny-llama');
    await page.waitForFunction(
      () => {
        const s = document.getElementById('real-model');
        return s.dataset.model === 'tiny-llama' && s.dataset.state === 'ready';
      },
      null,
      { timeout: 30_000 },
    );
    const count = 6;
    await page.fill('#real-count', String(count));
    await page.selectOption('#real-sampling', 'greedy');
    await page.click('#real-run');
    await page.waitForFunction(
      (n) => {
        const s = document.getElementById('real-model');
        return s.dataset.state === 'done' && s.dataset.generated === String(n);
      },
      count,
      { timeout: 60_000 },
    );
    // the frame that draws what 'done' brought
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const rows = await canvasStats(page, '#real-heads canvas.head-row');
    assert.equal(rows.length, 32, 'four layers of eight heads');
    for (const r of rows) assert.ok(r.nonWhite > r.total * 0.5, 'each row drawn');
    const groups = await page.$$eval('#real-heads .real-head', (hs) => hs.map((h) => h.dataset.kvHead).join(''));
    assert.equal(groups, '00001111'.repeat(4));

    // The same generation in Node, its keys kept as the runner projects them (before rope); the last query's
    // weights from the float64 reference with rope (scripts/lib/reference.mjs).
    const prompt = encodeBytes(await page.inputValue('#real-prompt'));
    const model = await readLlama();
    const mha = await createMHA();
    const session = model.createSession(mha, { dtype: 'float32' });
    const keys = [];
    const queries = [];
    session.onProjections = (layer, q, k) => {
      keys[layer] = keys[layer] ? Float32Array.from([...keys[layer], ...k]) : k.slice();
      queries[layer] = q;
    };
    generate(session, prompt, count, { greedy: true });
    const { H, Hkv, Dh } = model.dims;
    const labels = await page.$$eval('#real-heads canvas.head-row', (cs) =>
      cs.map((c) => c.getAttribute('aria-label')),
    );
    for (let layer = 0; layer < 4; layer++) {
      const T = keys[layer].length / (Hkv * Dh);
      const q = queries[layer].subarray(queries[layer].length - H * Dh);
      const weights = new Float64Array(H * T);
      const rope = { ...session.rope, rotaryDim: Dh };
      const shape = { B: 1, S: 1, T, D: H * Dh, H, Hkv, causal: true, queryOffset: T - 1, rope };
      attention(q, keys[layer], new Float32Array(keys[layer].length), shape, new Float64Array(H * Dh), { weights });
      for (let h = 0; h < H; h++) {
        const row = weights.subarray(h * T, (h + 1) * T);
        const argmax = row.indexOf(Math.max(...row));
        const label = labels[layer * H + h];
        assert.match(
          label,
          new RegExp(`puts ${row[argmax].toFixed(2)} on byte ${argmax} `),
          `L${layer} H${h}: ${label}`,
        );
      }
    }
    session.free();
    mha.dispose();
    assert.deepEqual(problems, []);
  });
});

describe('screenshots', () => {
  for (const width of [1280, 390]) {
    test(`default view, options panel, cache view and tiny-llama's heads at ${width} px; nothing wider than the page`, async (t) => {
      const { page, problems } = await openDemo(t, { width, height: 900 });
      await page.screenshot({ path: `${SHOTS}default-${width}.png` });
      await change(page, () => page.selectOption('#numKvHeads', '2'));
      await change(page, () => page.selectOption('#mask', 'causal'));
      await change(page, () => page.fill('#windowLeft', '3'));
      await change(page, () => page.fill('#sinks', '0.5'));
      await page.locator('#controls fieldset.modern').screenshot({ path: `${SHOTS}options-panel-${width}.png` });
      await page.locator('#heatmaps').screenshot({ path: `${SHOTS}options-maps-${width}.png` });
      await page.locator('#stage-card').screenshot({ path: `${SHOTS}stages-${width}.png` });
      await page.locator('#cache-view').screenshot({ path: `${SHOTS}cache-view-${width}.png` });
      await page.selectOption('#real-model-picker', 'tiny-llama');
      await page.waitForFunction(() => document.getElementById('real-model').dataset.state === 'ready', null, {
        timeout: 30_000,
      });
      await page.fill('#real-count', '24');
      await page.click('#real-run');
      await page.waitForFunction(() => document.getElementById('real-model').dataset.state === 'done', null, {
        timeout: 60_000,
      });
      await page.locator('#real-model').screenshot({ path: `${SHOTS}tiny-llama-heads-${width}.png` });
      const wide = await page.evaluate(() => document.scrollingElement.scrollWidth);
      assert.ok(wide <= width, `the page is ${wide}px wide at ${width}px`);
      const overflowing = await page.$$eval(
        'canvas',
        (cs, w) =>
          cs.filter((c) => !c.hidden && c.getBoundingClientRect().right > w + 0.5).map((c) => c.id || c.className),
        width,
      );
      assert.deepEqual(overflowing, []);
      assert.deepEqual(problems, []);
    });
  }
});
