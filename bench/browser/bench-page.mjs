// The page the in-page A/B tools run in (relaxed-ab.mjs, wasm-ab.mjs): Debian's Chromium as the browser
// tests launch it, on bench/browser/index.html served by the test server, closed again afterwards.
import { launchChromium } from '../../tests/browser/chromium.mjs';
import { startTestServer } from '../../tests/browser/engines.mjs';

/** `--name value` of a command line, or `fallback`. */
export function option(args, name, fallback) {
  return args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
}

/** Runs body(page, browser) on a ready bench page and returns its result; browser and server close after. */
export async function withBenchPage(body) {
  const server = await startTestServer();
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.goto(new URL('bench/browser/index.html', server.url).href);
    await page.waitForFunction(() => window.__benchReady === true);
    return await body(page, browser);
  } finally {
    await browser.close();
    await server.close();
  }
}
