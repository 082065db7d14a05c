// The page the in-page A/B tools run in (relaxed-ab.mjs, wasm-ab.mjs): Debian's Chromium as the browser
// tests launch it (or, with --engine, any engine of tests/browser/engines.mjs), on
// bench/browser/index.html served by the test server, closed again afterwards.
import { launchChromium } from '../../tests/browser/chromium.mjs';
import { launchEngine, startTestServer } from '../../tests/browser/engines.mjs';

/** `--name value` of a command line, or `fallback`. */
export function option(args, name, fallback) {
  return args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
}

/**
 * Runs body(page, browserName) on a ready bench page and returns its result; browser and server close
 * after. `engine`: 'chromium' (default), 'firefox' or 'webkit'; `page.evaluate(fn, arg)` works in each.
 */
export async function withBenchPage(body, { engine = 'chromium' } = {}) {
  if (engine !== 'chromium') return withEnginePage(body, engine);
  const server = await startTestServer();
  const browser = await launchChromium();
  try {
    const page = await browser.newPage();
    await page.goto(new URL('bench/browser/index.html', server.url).href);
    await page.waitForFunction(() => window.__benchReady === true);
    return await body(page, `Chromium ${browser.version()}`);
  } finally {
    await browser.close();
    await server.close();
  }
}

async function withEnginePage(body, name) {
  const server = await startTestServer();
  // Bench calls run far longer than a test's: no page function may time out under an hour.
  const engine = await launchEngine(name, { evaluateTimeoutMs: 3_600_000 });
  try {
    const page = await engine.open(new URL('bench/browser/index.html', server.url).href);
    await page.waitFor(() => window.__benchReady === true);
    return await body(page, engine.version);
  } finally {
    await engine.close();
    await server.close();
  }
}
