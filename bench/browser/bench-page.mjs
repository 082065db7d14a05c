// The page the in-page A/B tools run in (relaxed-ab.mjs, wasm-ab.mjs): an engine of the browser tests
// layer (scripts/lib/engines.mjs: Debian's Chromium by default, or with --engine Firefox ESR or WebKitGTK)
// on bench/browser/index.html served by the test server, closed again afterwards.
import { launchEngine, startTestServer } from '../../scripts/lib/engines.mjs';

/** `--name value` of a command line, or `fallback`. */
export function option(args, name, fallback) {
  return args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
}

/**
 * Runs body(page, browserName) on a ready bench page and returns its result; browser and server close
 * after. `engine`: 'chromium' (default), 'firefox' or 'webkit'; `page.evaluate(fn, arg)` works in each.
 */
export async function withBenchPage(body, { engine = 'chromium' } = {}) {
  const server = await startTestServer();
  try {
    // Bench calls run far longer than a test's: no page function may time out under an hour.
    const launched = await launchEngine(engine, { evaluateTimeoutMs: 3_600_000 });
    try {
      const page = await launched.open(new URL('bench/browser/index.html', server.url).href);
      await page.waitFor(() => window.__benchReady === true);
      return await body(page, launched.version);
    } finally {
      await launched.close();
    }
  } finally {
    await server.close();
  }
}
