// What only the browser suites need: forEachEngine (one describe block per engine of scripts/lib/engines.mjs,
// launched before its tests and closed after them), a served repository with Chromium for a test file
// (chromiumAndServer), and the pixel statistics of a page's canvases (canvasStats). The launchers themselves
// are in scripts/lib/ (engines.mjs, chromium.mjs), shared with the bench.
import { after, before, describe } from 'node:test';
import { serve } from '../../scripts/serve.mjs';
import { launchChromium } from '../../scripts/lib/chromium.mjs';
import { ENGINES, LAUNCH_TIMEOUT_MS, launchEngine, selectedEngines } from '../../scripts/lib/engines.mjs';

/**
 * For a test file: before its tests, the repository served on a free port (scripts/serve.mjs, as `npm
 * start` serves it) and Chromium launched; after them, both closed. Returns an object whose `server` and
 * `browser` are set once the `before` hook has run.
 */
export function chromiumAndServer({ before, after }) {
  const session = { server: undefined, browser: undefined };
  before(async () => {
    session.server = await serve({ port: 0 });
    session.browser = await launchChromium();
  });
  after(async () => {
    await session.browser?.close();
    await session.server?.close();
  });
  return session;
}

/**
 * Per canvas that `selector` matches on a page (Playwright's or the engine layer's): its size, pixel count, the pixels that are not white
 * and the distinct colors (and data-head, where the canvas has one): enough to tell a drawn heatmap from
 * a blank or one-color canvas.
 */
export function canvasStats(page, selector) {
  // page.evaluate with an argument: Playwright's pages and the engine layer's (scripts/lib/engines.mjs) both have it.
  return page.evaluate(
    (sel) =>
      [...document.querySelectorAll(sel)].map((c) => {
        const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
        let nonWhite = 0;
        const colors = new Set();
        for (let i = 0; i < data.length; i += 4) {
          if (data[i] < 250 || data[i + 1] < 250 || data[i + 2] < 250) nonWhite++;
          colors.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
        }
        return {
          width: c.width,
          height: c.height,
          nonWhite,
          colors: colors.size,
          total: data.length / 4,
          head: c.dataset.head,
        };
      }),
    selector,
  );
}

/**
 * Declares the suite's tests once per selected engine, in a describe block named after the engine that
 * launches the browser once before its tests and closes it after them. `body(engine)` gets the object
 * that the launch fills in: `name` and `caps` are there at once (tests may branch on them), `version`,
 * `open` and `close` from the launch on. `except` names engines to leave out (a suite that has its own
 * Chromium tests).
 */
export function forEachEngine(body, { except = [] } = {}) {
  for (const name of selectedEngines().filter((n) => !except.includes(n))) {
    describe(name, () => {
      const engine = { name, caps: ENGINES[name] };
      before(
        async () => {
          Object.assign(engine, await launchEngine(name));
        },
        { timeout: 3 * LAUNCH_TIMEOUT_MS },
      );
      after(() => engine.close?.());
      body(engine);
    });
  }
}
