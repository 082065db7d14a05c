// The demo page (web/demo/), served the way `npm start` serves it (scripts/serve.mjs, repository root),
// driven in headless Chromium; at the end, the same page on the other engines of scripts/lib/engines.mjs
// (Firefox, WebKit): it draws its heatmaps and finishes its checks with no console errors. Assumes dist/
// is built (npm test builds first).
//
//   node --test tests/browser/demo.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { startTestServer } from '../../scripts/lib/engines.mjs';
import { canvasStats, chromiumAndServer, forEachEngine } from './suites.mjs';

const RESULTS = fileURLToPath(new URL('../../test-results/', import.meta.url));

const harness = chromiumAndServer({ before, after });
before(() => mkdir(RESULTS, { recursive: true }));

/** Opens the demo at `/` (which redirects to /web/demo/) and records every console error and page error. */
async function openDemo(t, viewport = { width: 1280, height: 800 }) {
  const context = await harness.browser.newContext({ viewport });
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console.error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  t.after(() => context.close());
  await page.goto(harness.server.url);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 20_000 });
  return { page, problems };
}

const renders = (page) => page.evaluate(() => Number(document.body.dataset.renders));

/** Runs `action` and waits for the render it causes. */
async function change(page, action) {
  const before = await renders(page);
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.renders) > n, before, { timeout: 10_000 });
}

/** Waits until panel `id` ('checks' or 'timing') shows the results of the latest job. */
async function waitPanel(page, id, timeout = 60_000) {
  await page.waitForFunction(
    (panel) => {
      const el = document.getElementById(panel);
      return el.dataset.state === 'done' && el.dataset.job === document.body.dataset.job;
    },
    id,
    { timeout },
  );
}

/** Per heatmap canvas: size, pixels that are not white, distinct colors, data-head. */
const heatmapStats = (page) => canvasStats(page, '#heatmaps canvas');

/** Fraction of pixels that differ (by more than a small tolerance) between heatmaps a and b. */
function heatmapDifference(page, a, b) {
  return page.evaluate(
    ([i, j]) => {
      const cs = document.querySelectorAll('#heatmaps canvas');
      const x = cs[i].getContext('2d').getImageData(0, 0, cs[i].width, cs[i].height).data;
      const y = cs[j].getContext('2d').getImageData(0, 0, cs[j].width, cs[j].height).data;
      if (x.length !== y.length) return 1;
      let diff = 0;
      for (let p = 0; p < x.length; p += 4) {
        if (Math.abs(x[p] - y[p]) + Math.abs(x[p + 1] - y[p + 1]) + Math.abs(x[p + 2] - y[p + 2]) > 24) diff++;
      }
      return diff / (x.length / 4);
    },
    [a, b],
  );
}

/** RGB at the center of cell (i, j) of heatmap h, read through the canvas' own plot geometry. */
function cellColor(page, h, i, j) {
  return page.evaluate(
    ([head, row, col]) => {
      const c = document.querySelector(`#heatmaps canvas[data-head="${head}"]`);
      const scale = c.width / parseFloat(c.style.width);
      const cell = Number(c.dataset.cell);
      const x = Math.round((Number(c.dataset.left) + (col + 0.5) * cell) * scale);
      const y = Math.round((Number(c.dataset.top) + (row + 0.5) * cell) * scale);
      return [...c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)];
    },
    [h, i, j],
  );
}

const isGrey = ([r, g, b]) => Math.abs(r - g) < 8 && Math.abs(g - b) < 8 && r < 240;

describe('scripts/serve.mjs', () => {
  test('redirects / to the demo and sends COOP/COEP and correct MIME types on every response', async () => {
    const root = await fetch(harness.server.url, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), '/web/demo/');
    const cases = [
      ['web/demo/', 200, 'text/html; charset=utf-8'],
      ['web/demo/main.js', 200, 'text/javascript; charset=utf-8'],
      ['web/demo/style.css', 200, 'text/css; charset=utf-8'],
      ['dist/index.js', 200, 'text/javascript; charset=utf-8'],
      ['dist/mha.wasm', 200, 'application/wasm'],
      ['no/such/file.js', 404, 'text/plain; charset=utf-8'],
      ['.git/HEAD', 404, 'text/plain; charset=utf-8'],
    ];
    for (const [path, status, type] of cases) {
      const r = await fetch(new URL(path, harness.server.url));
      assert.equal(r.status, status, path);
      assert.equal(r.headers.get('content-type'), type, path);
      assert.equal(r.headers.get('cross-origin-opener-policy'), 'same-origin', path);
      assert.equal(r.headers.get('cross-origin-embedder-policy'), 'require-corp', path);
      await r.arrayBuffer();
    }
    const wasm = new Uint8Array(await (await fetch(new URL('dist/mha.wasm', harness.server.url))).arrayBuffer());
    assert.deepEqual([...wasm.subarray(0, 4)], [0x00, 0x61, 0x73, 0x6d]);
  });
});

describe('demo page', () => {
  test('default view: one non-blank heatmap per head, build info, cross-origin isolated, no console errors', async (t) => {
    const { page, problems } = await openDemo(t);
    assert.match(page.url(), /\/web\/demo\/$/);
    assert.equal(await page.evaluate(() => window.crossOriginIsolated), true);

    const heads = Number(await page.inputValue('#numHeads'));
    assert.equal(heads, 4);
    const stats = await heatmapStats(page);
    assert.equal(stats.length, heads, 'one canvas per head');
    for (const s of stats) {
      assert.ok(s.width > 100 && s.height > 100, `head ${s.head}: canvas ${s.width}x${s.height}`);
      assert.ok(s.nonWhite > s.total * 0.25, `head ${s.head}: only ${s.nonWhite} of ${s.total} pixels drawn`);
      assert.ok(s.colors > 8, `head ${s.head}: only ${s.colors} colors`);
    }
    const build = await page.textContent('#build-info');
    assert.match(build, /v\d+\.\d+\.\d+/);
    assert.match(build, /SIMD128 on/);
    assert.match(build, /1 thread/);
    // Axes carry the words of the sentence.
    const tokens = await page.$$eval('#token option', (os) => os.map((o) => o.textContent));
    assert.deepEqual(tokens.slice(0, 3), ['0: The', '1: cat', '2: sat']);

    // Hover a cell: the tooltip names query, key and weight.
    // Geometry and position are read in one step (a resize redraw could replace the canvas between two).
    const canvas = page.locator('#heatmaps canvas[data-head="1"]');
    const at = await canvas.evaluate((c) => {
      const k = c.getBoundingClientRect().width / parseFloat(c.style.width);
      return { x: (+c.dataset.left + 1.5 * +c.dataset.cell) * k, y: (+c.dataset.top + 2.5 * +c.dataset.cell) * k };
    });
    await canvas.hover({ position: at });
    const tip = page.locator('#tooltip');
    await tip.waitFor({ state: 'visible' });
    const tipText = await tip.textContent();
    assert.match(tipText, /Head 1/);
    assert.match(tipText, /query 2 “sat”/);
    assert.match(tipText, /key 1 “cat”/);
    assert.match(tipText, /weight 0\.\d{4}/);
    assert.deepEqual(problems, []);
  });

  test('heads attend in visibly different patterns for the sentence input', async (t) => {
    const { page, problems } = await openDemo(t);
    assert.equal(await page.isChecked('input[name="source"][value="sentence"]'), true);
    const n = (await heatmapStats(page)).length;
    for (let a = 0; a < n; a++) {
      for (let b = a + 1; b < n; b++) {
        const d = await heatmapDifference(page, a, b);
        assert.ok(d > 0.05, `heads ${a} and ${b} differ in only ${(d * 100).toFixed(1)}% of pixels`);
      }
    }
    // head 1 is built to look at the previous word: query 3 "on" puts its largest weight on key 2 "sat"
    const darkest = await page.evaluate(() => {
      const c = document.querySelector('#heatmaps canvas[data-head="1"]');
      const scale = c.width / parseFloat(c.style.width);
      const ctx = c.getContext('2d');
      const lum = (j) => {
        const x = Math.round((+c.dataset.left + (j + 0.5) * +c.dataset.cell) * scale);
        const y = Math.round((+c.dataset.top + 3.5 * +c.dataset.cell) * scale);
        const [r, g, b] = ctx.getImageData(x, y, 1, 1).data;
        return r + g + b;
      };
      const all = Array.from({ length: 11 }, (_, j) => lum(j));
      return all.indexOf(Math.min(...all));
    });
    assert.equal(darkest, 2);
    assert.deepEqual(problems, []);
  });

  test('changing heads or the mask re-renders the heatmaps', async (t) => {
    const { page, problems } = await openDemo(t);
    await change(page, () => page.fill('#numHeads', '8'));
    assert.equal((await heatmapStats(page)).length, 8);
    assert.equal(await page.getAttribute('#heatmaps', 'data-heads'), '8');

    // No mask: the top-right cell (query 0, key 10) is drawn from the color scale, not grey.
    assert.ok(!isGrey(await cellColor(page, 0, 0, 10)), 'unmasked cell should be colored');
    const before = await page.$eval('#heatmaps canvas[data-head="0"]', (c) => c.toDataURL());
    await change(page, () => page.selectOption('#mask', 'causal'));
    const afterCausal = await page.$eval('#heatmaps canvas[data-head="0"]', (c) => c.toDataURL());
    assert.notEqual(afterCausal, before, 'causal mask re-renders');
    assert.ok(isGrey(await cellColor(page, 0, 0, 10)), 'masked cell (0, 10) is drawn grey/hatched');
    assert.ok(!isGrey(await cellColor(page, 0, 10, 0)), 'visible cell (10, 0) stays colored');

    // Random mask hides one whole query row per item: it is labelled as NaN and drawn dark, not as data.
    await change(page, () => page.selectOption('#mask', 'random'));
    assert.match(await page.textContent('#heat-sub'), /fully masked row: NaN/);
    const nanRows = await page.evaluate(() => {
      const c = document.querySelector('#heatmaps canvas[data-head="0"]');
      const scale = c.width / parseFloat(c.style.width);
      const ctx = c.getContext('2d');
      const rows = [];
      for (let i = 0; i < 11; i++) {
        const x = Math.round((+c.dataset.left + 0.2 * +c.dataset.cell) * scale);
        const y = Math.round((+c.dataset.top + (i + 0.5) * +c.dataset.cell) * scale);
        const [r, g, b] = ctx.getImageData(x, y, 1, 1).data;
        if (r === 0x3f && g === 0x3f && b === 0x46) rows.push(i);
      }
      return rows;
    });
    assert.equal(nanRows.length, 1, `expected one NaN row drawn, got ${JSON.stringify(nanRows)}`);

    // Key padding: item 1 ("Heads are an extra axis, not a loop", 8 words) hides keys 8..10.
    await change(page, () => page.selectOption('#mask', 'padding'));
    await change(page, () => page.selectOption('#item', '1'));
    assert.ok(isGrey(await cellColor(page, 2, 0, 9)), 'padding key 9 of item 1 is masked');
    assert.ok(!isGrey(await cellColor(page, 2, 0, 7)), 'key 7 of item 1 is visible');
    assert.match(await page.textContent('#code'), /const validLen = \[11, 8\];/);
    assert.deepEqual(problems, []);
  });

  test('invalid settings get an inline explanation, never an exception', async (t) => {
    const { page, problems } = await openDemo(t);
    const heatmapsBefore = (await heatmapStats(page)).length;
    await page.fill('#dModel', '30');
    const errors = page.locator('#errors');
    await errors.waitFor({ state: 'visible' });
    assert.equal(await errors.getAttribute('aria-live'), 'polite');
    assert.match(await errors.textContent(), /d_model 30 is not divisible by 4 heads \(30 % 4 = 2\)/);
    assert.equal(await page.getAttribute('#dModel', 'aria-invalid'), 'true');
    assert.equal((await heatmapStats(page)).length, heatmapsBefore, 'the last valid result stays on screen');

    await page.fill('#dModel', '64');
    await errors.waitFor({ state: 'hidden' });
    assert.equal(await page.getAttribute('#dModel', 'aria-invalid'), null);

    await change(page, () => page.check('input[name="source"][value="random"]'));
    for (const [field, value, message] of [
      ['#batch', '0', /Batch must be between 1 and 8 in this demo, got 0/],
      ['#seqLen', '', /Sequence length is empty/],
      ['#numHeads', '2.5', /Heads must be a whole number/],
      ['#numHeads', '128', /Heads must be between 1 and 64/],
    ]) {
      const previous = await page.inputValue(field);
      await page.fill(field, value);
      await page.waitForFunction(
        (re) => new RegExp(re).test(document.getElementById('errors').textContent),
        message.source,
      );
      await change(page, () => page.fill(field, previous));
      assert.equal(await errors.isHidden(), true);
    }
    await page.check('input[name="source"][value="sentence"]');
    await page.fill('#sentence', '   ');
    await page.waitForFunction(() => /Type at least one word/.test(document.getElementById('errors').textContent));
    assert.deepEqual(problems, []);
  });

  test('the numHeads = 1 check reports max difference 0 (exact); the float64 reference differs by rounding only', async (t) => {
    const { page, problems } = await openDemo(t);
    const read = async () => {
      await waitPanel(page, 'checks');
      return {
        exact: await page.textContent('#exact-diff'),
        verdict: await page.textContent('#exact-verdict'),
        ref: Number(await page.textContent('#ref-diff')),
        split: await page.textContent('#split-ok'),
      };
    };
    const settings = [
      async () => {},
      () => page.selectOption('#mask', 'causal'),
      () => page.fill('#numHeads', '1'),
      () => page.check('input[name="source"][value="random"]'),
      () => page.fill('#numHeads', '8'),
      () => page.selectOption('#mask', 'random'),
      () => page.fill('#seqLen', '37'),
      () => page.fill('#dModel', '96'),
    ];
    for (const [step, apply] of settings.entries()) {
      if (step > 0) await change(page, apply);
      const r = await read();
      assert.equal(r.exact, '0', `step ${step}: max difference`);
      assert.match(r.verdict, /exact: bit-identical/);
      assert.ok(Number.isFinite(r.ref) && r.ref < 1e-5, `step ${step}: float64 reference differs by ${r.ref}`);
      assert.equal(r.split, 'yes');
    }
    assert.deepEqual(problems, []);
  });

  test('the timing panel shows numbers, and the code panel shows the current call', async (t) => {
    const { page, problems } = await openDemo(t);
    await change(page, () => page.fill('#numHeads', '8'));
    await waitPanel(page, 'timing');
    const time = /^\d+(\.\d+)? (µs|ms|s)$/;
    assert.match(await page.textContent('#t-wasm'), time);
    assert.match(await page.textContent('#t-js'), time);
    assert.match(await page.textContent('#t-first'), time);
    const speedup = await page.textContent('#t-speedup');
    assert.match(speedup, /^\d+(\.\d+)?×$/);
    assert.ok(parseFloat(speedup) > 0);
    assert.equal(await page.textContent('#progress-text'), 'done');

    const code = await page.textContent('#code');
    assert.match(code, /const mha = await createMHA\(\);/);
    assert.match(code, /batch: 2, seqLen: 11, dModel: 64, numHeads: 8/);
    assert.doesNotMatch(code, /causal/);
    await change(page, () => page.selectOption('#mask', 'causal'));
    assert.match(await page.textContent('#code'), /causal: true/);
    await page.click('#copy');
    await page.waitForFunction(() => document.getElementById('copy-status').textContent.length > 0);
    assert.deepEqual(problems, []);
  });

  test('controls are labelled and keyboard reachable; heatmaps are readable by keyboard', async (t) => {
    const { page, problems } = await openDemo(t);
    const unlabelled = await page.evaluate(() =>
      [...document.querySelectorAll('input, select, textarea, button')]
        .filter(
          (c) =>
            !(
              c.labels?.length ||
              c.getAttribute('aria-label') ||
              c.getAttribute('aria-labelledby') ||
              (c.tagName === 'BUTTON' && c.textContent.trim())
            ),
        )
        .map((c) => c.id || c.outerHTML.slice(0, 60)),
    );
    assert.deepEqual(unlabelled, []);

    const reached = new Set();
    await page.focus('body');
    for (let i = 0; i < 90; i++) {
      await page.keyboard.press('Tab');
      const id = await page.evaluate(
        () =>
          document.activeElement?.id ||
          (document.activeElement?.dataset?.head && `head-${document.activeElement.dataset.head}`),
      );
      if (id) reached.add(id);
    }
    const ids = ['sentence', 'dModel', 'numHeads', 'mask', 'numKvHeads', 'queryOffset', 'windowLeft', 'windowRight'];
    ids.push('sinks', 'softcap', 'alibi', 'rope', 'ropeTheta', 'item', 'token', 'head-0', 'stageHead', 'rerun', 'copy');
    ids.push('cache-dtype', 'cache-tokens', 'ring-window', 'prefix-samples');
    for (const id of ids) {
      assert.ok(reached.has(id), `Tab never reached #${id} (reached ${[...reached].join(', ')})`);
    }

    await page.focus('#heatmaps canvas[data-head="0"]');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowRight');
    const tip = page.locator('#tooltip');
    await tip.waitFor({ state: 'visible' });
    assert.match(await tip.textContent(), /query 1 “cat”.*key 1 “cat”/s);
    assert.deepEqual(problems, []);
  });

  test('screenshots at 1280x800 and 390x844, with no horizontal overflow on the narrow one', async (t) => {
    {
      const { page, problems } = await openDemo(t, { width: 1280, height: 800 });
      await waitPanel(page, 'timing');
      await page.screenshot({ path: `${RESULTS}demo-1280x800.png` });
      await page.screenshot({ path: `${RESULTS}demo-1280-full.png`, fullPage: true });
      assert.ok((await page.evaluate(() => document.scrollingElement.scrollWidth)) <= 1280);
      assert.deepEqual(problems, []);
    }
    {
      const { page, problems } = await openDemo(t, { width: 390, height: 844 });
      await waitPanel(page, 'timing');
      await page.screenshot({ path: `${RESULTS}demo-390x844.png` });
      await page.screenshot({ path: `${RESULTS}demo-390-full.png`, fullPage: true });
      const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth);
      assert.ok(overflow <= 390, `page is ${overflow}px wide at a 390px viewport`);
      const stats = await heatmapStats(page);
      assert.equal(stats.length, 4);
      const widest = await page.$$eval('#heatmaps canvas', (cs) =>
        Math.max(...cs.map((c) => c.getBoundingClientRect().right)),
      );
      assert.ok(widest <= 390, `a heatmap reaches x = ${widest}`);
      assert.deepEqual(problems, []);
    }
  });

  test('resizing the window redraws the heatmaps at the new width; a settled page is not redrawn', async (t) => {
    const { page, problems } = await openDemo(t, { width: 1280, height: 800 });
    await waitPanel(page, 'timing');
    const widths = () => page.$$eval('#heatmaps canvas', (cs) => cs.map((c) => c.width));
    const wide = await widths();
    await page.evaluate(() => document.querySelector('#heatmaps canvas').setAttribute('data-marked', ''));
    await page.waitForTimeout(300);
    assert.equal(await page.locator('#heatmaps canvas[data-marked]').count(), 1, 'a settled page redrew its heatmaps');
    await page.setViewportSize({ width: 600, height: 800 });
    await page.waitForFunction(() => !document.querySelector('#heatmaps canvas[data-marked]'), null, {
      timeout: 5_000,
    });
    const narrow = await widths();
    assert.equal(narrow.length, wide.length);
    assert.ok(narrow[0] < wide[0], `canvas ${wide[0]}px wide at 1280, ${narrow[0]}px at 600`);
    assert.ok((await page.evaluate(() => document.scrollingElement.scrollWidth)) <= 600);
    assert.deepEqual(problems, []);
  });
});

describe('demo page on the other engines', () => {
  let hooked;

  before(async () => {
    hooked = await startTestServer();
  });

  after(async () => {
    await hooked?.close();
  });

  forEachEngine(
    (engine) => {
      test('draws one non-blank heatmap per head, finishes its checks and timing, redraws for 8 heads; no console errors', async () => {
        const page = await engine.open(hooked.url);
        await page.waitFor(() => document.body.dataset.ready === 'true', undefined, { timeout: 20_000 });
        assert.match(await page.url(), /\/web\/demo\/$/);
        assert.equal(await page.evaluate(() => window.crossOriginIsolated), true);
        const stats = await heatmapStats(page);
        assert.equal(stats.length, 4, 'one canvas per head');
        for (const s of stats) {
          assert.ok(s.width > 100 && s.height > 100, `head ${s.head}: canvas ${s.width}x${s.height}`);
          assert.ok(s.nonWhite > s.total * 0.25, `head ${s.head}: only ${s.nonWhite} of ${s.total} pixels drawn`);
          assert.ok(s.colors > 8, `head ${s.head}: only ${s.colors} colors`);
        }
        const build = await page.evaluate(() => document.getElementById('build-info').textContent);
        assert.match(build, /v\d+\.\d+\.\d+/);
        assert.match(build, /SIMD128 on/);
        const panelsDone = () =>
          ['checks', 'timing'].every((id) => {
            const el = document.getElementById(id);
            return el.dataset.state === 'done' && el.dataset.job === document.body.dataset.job;
          });
        await page.waitFor(panelsDone, undefined, { timeout: 60_000 });
        assert.equal(await page.evaluate(() => document.getElementById('exact-diff').textContent), '0');
        assert.match(
          await page.evaluate(() => document.getElementById('t-wasm').textContent),
          /^\d+(\.\d+)? (µs|ms|s)$/,
        );

        const renders = await page.evaluate(() => Number(document.body.dataset.renders));
        await page.evaluate(() => {
          document.getElementById('sinks').value = '1'; // the options panel: read by the same update
          const heads = document.getElementById('numHeads');
          heads.value = '8';
          heads.dispatchEvent(new Event('input', { bubbles: true }));
        });
        await page.waitFor((n) => Number(document.body.dataset.renders) > n, renders, { timeout: 10_000 });
        assert.equal((await heatmapStats(page)).length, 8);
        assert.match(await page.evaluate(() => document.getElementById('heat-sub').textContent), /mass the sink takes/);
        // The cache view: its numbers against the float64 reference, in range
        await page.waitFor(() => document.getElementById('cache-view').dataset.state === 'ready');
        const cacheErrors = await page.evaluate(() =>
          ['cache-weights-error', 'cache-out-error', 'ring-difference', 'prefix-difference'].map((id) =>
            Number(document.getElementById(id).dataset.value),
          ),
        );
        assert.ok(
          cacheErrors.every((e) => Number.isFinite(e) && e < 0.1),
          `cache view errors ${cacheErrors}`,
        );
        // The real-model view loads tiny-gpt in its Worker here too (tests/browser/tiny-gpt.test.mjs: Chromium)
        await page.waitFor(() => document.getElementById('real-model').dataset.state === 'ready', undefined, {
          timeout: 60_000,
        });
        assert.match(
          await page.evaluate(() => document.getElementById('real-status').textContent),
          /^tiny-gpt loaded in \d+ ms/,
        );
        assert.deepEqual(await page.problems(), []);
        await page.close();
      });
    },
    { except: ['chromium'] },
  );
});
