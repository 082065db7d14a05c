// Debian's Chromium (/usr/bin/chromium) driven by playwright-core, as every browser test launches it:
// headless, no sandbox (tests run as root), and no background network traffic, which this machine's
// closed network would refuse over and over.
import { chromium } from 'playwright-core';
import { serve } from '../../scripts/serve.mjs';

export const CHROMIUM_ARGS = Object.freeze(['--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run']);

export function launchChromium() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: [...CHROMIUM_ARGS] });
}

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
  // page.evaluate with an argument: Playwright's pages and the engine layer's (tests/browser/engines.mjs) both have it.
  return page.evaluate((sel) => [...document.querySelectorAll(sel)].map((c) => {
    const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
    let nonWhite = 0;
    const colors = new Set();
    for (let i = 0; i < data.length; i += 4) {
      if (data[i] < 250 || data[i + 1] < 250 || data[i + 2] < 250) nonWhite++;
      colors.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
    }
    return { width: c.width, height: c.height, nonWhite, colors: colors.size, total: data.length / 4, head: c.dataset.head };
  }), selector);
}
