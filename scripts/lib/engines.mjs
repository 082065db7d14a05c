// The browser engines every browser suite runs on, behind one interface: launch an engine once per suite
// file, open a page, run a function in it, and read what went wrong there (console errors, uncaught
// errors, failed requests) and the console warnings.
//
//   chromium      Debian's Chromium (Blink, V8), playwright-core, headless
//   firefox       Debian's Firefox ESR (Gecko, SpiderMonkey), puppeteer-core over WebDriver BiDi, headless
//   webkit        WebKitGTK's MiniBrowser (WebKit, JavaScriptCore), selenium-webdriver + WebKitWebDriver,
//                 on a private Xvfb display; as WebKitGTK ships: no SharedArrayBuffer, no relaxed SIMD
//   webkit-flags  the same with JSC_useSharedArrayBuffer=1 and JSC_useWasmRelaxedSIMD=1 in the driver's
//                 environment: SharedArrayBuffer in isolated pages as Safari gives it, and relaxed SIMD
//
// MHA_TEST_ENGINES=chromium,firefox (comma-separated) limits a run to some of them.
//
// Classic WebDriver (WebKit) shows no console or network events, so pages served by startTestServer()
// get a small inline script as their first element that records console.error, console.warn, uncaught
// errors and unhandled rejections, and the server's own log gives WebKit's failed requests. Chromium and
// Firefox report all of these as events. Every problem is one string in one format on every engine:
//   `console.error: <text>`, `pageerror: <message>`, `HTTP <status>: <url>`, `request failed: <url>: <why>`.
// A missing /favicon.ico (Firefox and WebKit ask for one) is not a problem.
//
// Shared by the browser suites (tests/browser/, whose node:test wrapper forEachEngine is in
// tests/browser/suites.mjs) and the browser bench (bench/browser/); it imports neither.
import { createServer } from 'node:http';
import { cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHandler, ISOLATION_HEADERS, REPO_ROOT } from '../serve.mjs';
import { launchChromium } from './chromium.mjs';
import {
  EVALUATE_TIMEOUT_MS,
  LAUNCH_TIMEOUT_MS,
  guardPid,
  isFavicon,
  responseLog,
  withTimeout,
} from './engine-support.mjs';
import { launchWebKitEngine } from './engine-webkit.mjs';

export { EVALUATE_TIMEOUT_MS, LAUNCH_TIMEOUT_MS };

/**
 * What each engine configuration supports, as the capability test (smoke.test.mjs) checks in the page:
 * - threads: SharedArrayBuffer (and so the simd-threads build) in a cross-origin isolated page;
 * - relaxedSimd: WebAssembly.validate accepts a module with f32x4.relaxed_madd (RELAXED_SIMD_PROBE).
 * The suites choose their expectation from this table (a threads request in an engine without threads
 * must fall back with its one warning); the relaxed-SIMD build selection (issue #15) is to do the same.
 */
export const ENGINES = Object.freeze({
  chromium: Object.freeze({ family: 'Blink / V8', driver: 'playwright-core', threads: true, relaxedSimd: true }),
  firefox: Object.freeze({
    family: 'Gecko / SpiderMonkey',
    driver: 'puppeteer-core (WebDriver BiDi)',
    threads: true,
    relaxedSimd: true,
  }),
  webkit: Object.freeze({
    family: 'WebKit / JavaScriptCore',
    driver: 'selenium-webdriver + WebKitWebDriver',
    env: Object.freeze({}),
    threads: false,
    relaxedSimd: false,
  }),
  'webkit-flags': Object.freeze({
    family: 'WebKit / JavaScriptCore',
    driver: 'selenium-webdriver + WebKitWebDriver',
    env: Object.freeze({ JSC_useSharedArrayBuffer: '1', JSC_useWasmRelaxedSIMD: '1' }),
    threads: true,
    relaxedSimd: true,
  }),
});

/** The smallest module using f32x4.relaxed_madd (opcode fd 85 02): valid only where relaxed SIMD is on. */
export const RELAXED_SIMD_PROBE = Object.freeze([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x01, 0x7b, 0x00, 0x03, 0x02, 0x01, 0x00,
  0x0a, 0x0e, 0x01, 0x0c, 0x00, 0x20, 0x00, 0x20, 0x00, 0x20, 0x00, 0xfd, 0x85, 0x02, 0x1a, 0x0b,
]);

/** The engines of this run: those MHA_TEST_ENGINES lists, or all of them when it is unset or empty. */
export function selectedEngines() {
  const listed = (process.env.MHA_TEST_ENGINES ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const wanted = listed.length > 0 ? listed : Object.keys(ENGINES);
  for (const name of wanted) {
    if (!Object.hasOwn(ENGINES, name))
      throw new Error(
        `MHA_TEST_ENGINES: unknown engine "${name}" (expected some of ${Object.keys(ENGINES).join(', ')})`,
      );
  }
  return wanted;
}

const FIREFOX = '/usr/bin/firefox-esr';

// ---------------------------------------------------------------------------------------------------------
// The test server: scripts/serve.mjs's handler, plus the page hooks and a log of failed responses.

/** Records console.error, console.warn, uncaught errors and unhandled rejections into __mhaTestLog. */
const PAGE_HOOKS = `<script>/* mha-wasm test hooks (scripts/lib/engines.mjs) */(() => {
  const log = { problems: [], warnings: [] };
  Object.defineProperty(globalThis, '__mhaTestLog', { value: log });
  const text = (args) => args.map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.message : String(a))).join(' ');
  const { error, warn } = console;
  console.error = function (...args) { log.problems.push('console.error: ' + text(args)); return error.apply(this, args); };
  console.warn = function (...args) { log.warnings.push(text(args)); return warn.apply(this, args); };
  addEventListener('error', (e) => {
    // WebKit also fires a worker's uncaught error at the window, without an error object: say where from.
    if (e instanceof ErrorEvent) log.problems.push('pageerror: ' + (e.error ? e.error.message : e.message + (e.filename ? ' (' + e.filename + ')' : '')));
    else if (e.target !== window) log.problems.push('request failed: ' + (e.target.src || e.target.href) + ': ' + e.target.tagName + ' did not load');
  }, true);
  addEventListener('unhandledrejection', (e) => log.problems.push('pageerror: ' + (e.reason?.message ?? String(e.reason))));
})();</script>`;

/** Buffers an HTML 200 response and inserts the page hooks after its doctype (or first). */
function injectPageHooks(res) {
  const { writeHead, write, end } = res;
  let held = null;
  const chunks = [];
  res.writeHead = function (status, headers) {
    const type = headers?.['Content-Type'] ?? '';
    if (status === 200 && type.startsWith('text/html')) {
      held = { status, headers };
      return this;
    }
    return writeHead.call(this, status, headers);
  };
  res.write = function (chunk, ...rest) {
    if (!held) return write.call(this, chunk, ...rest);
    chunks.push(Buffer.from(chunk));
    return true;
  };
  res.end = function (chunk, ...rest) {
    if (!held) return end.call(this, chunk, ...rest);
    if (chunk && typeof chunk !== 'function') chunks.push(Buffer.from(chunk));
    const html = Buffer.concat(chunks).toString('utf8');
    const doctype = /^\s*<!doctype[^>]*>/i.exec(html)?.[0] ?? '';
    const body = Buffer.from(doctype + PAGE_HOOKS + html.slice(doctype.length));
    writeHead.call(this, held.status, { ...held.headers, 'Content-Length': body.length });
    return end.call(this, body);
  };
}

/**
 * Serves the repository (scripts/serve.mjs: COOP/COEP unless `isolation: false`, MIME types, `mounts`),
 * with the page hooks in every HTML page and every status >= 400 logged for WebKit's problem list.
 *
 * @param {object} [options] - createHandler's options, plus
 * @param {Record<string, {type: string, body: string, delayMs?: number}>} [options.overrides] - exact
 *   path -> response served instead of the file (a broken worker script, an HTML page where a .wasm is
 *   expected), after `delayMs`
 * @returns {Promise<{ url: string, close: () => Promise<void> }>} url with a trailing slash
 */
export function startTestServer({ overrides = {}, ...handlerOptions } = {}) {
  const handle = createHandler(handlerOptions);
  const isolation = handlerOptions.isolation === false ? {} : ISOLATION_HEADERS;
  const server = createServer((req, res) => {
    const url = `http://${req.headers.host}${req.url}`;
    res.on('finish', () => {
      if (res.statusCode >= 400) responseLog.push({ at: performance.now(), status: res.statusCode, url });
    });
    const path = new URL(url).pathname;
    if (Object.hasOwn(overrides, path)) {
      const { type, body, delayMs = 0 } = overrides[path];
      setTimeout(() => {
        res.writeHead(200, {
          ...isolation,
          'Content-Type': type,
          'Content-Length': Buffer.byteLength(body),
          'Cache-Control': 'no-cache',
        });
        res.end(body);
      }, delayMs);
      return;
    }
    if (req.method === 'GET') injectPageHooks(res);
    handle(req, res);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}/`,
        close: () =>
          new Promise((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------------------
// Engines. Each launcher returns { name, version, open(url, {viewport}) -> page, close() }, where a page is
// { url(), evaluate(fn, arg), waitFor(fn, arg, {timeout}), problems(), warnings(), native, close() }.

/** Records a page's console errors, uncaught errors and failed requests from Playwright/Puppeteer events. */
function recordEvents(page, { warningType }) {
  const problems = [];
  const warnings = [];
  page.on('console', (m) => {
    // Chromium logs an HTTP error a second time as a console error without its URL: the response event has it.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource'))
      problems.push(`console.error: ${m.text()}`);
    if (m.type() === warningType) warnings.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on(
    'response',
    (r) => r.status() >= 400 && !isFavicon(r.url()) && problems.push(`HTTP ${r.status()}: ${r.url()}`),
  );
  page.on('requestfailed', (r) => {
    const why = typeof r.failure === 'function' ? r.failure()?.errorText : undefined;
    problems.push(`request failed: ${r.url()}: ${why ?? 'no response'}`);
  });
  return { problems, warnings };
}

/**
 * A Playwright (Chromium) or Puppeteer (Firefox) page of `context` as the engine layer's page, once it has
 * loaded `url`: both drivers report problems as events. `waitFor(fn, arg, timeout)` is the driver's
 * waitForFunction (their argument orders differ).
 */
async function openEventPage(page, context, url, { warningType, waitFor }) {
  const seen = recordEvents(page, { warningType });
  await page.goto(url);
  return {
    native: page,
    url: () => page.url(),
    evaluate: (fn, arg) => page.evaluate(fn, arg),
    waitFor: (fn, arg, { timeout = 30_000 } = {}) => waitFor(fn, arg, timeout).then(() => {}),
    problems: async () => [...seen.problems],
    warnings: async () => [...seen.warnings],
    close: () => context.close(),
  };
}

async function launchChromiumEngine() {
  const browser = await withTimeout(launchChromium(), LAUNCH_TIMEOUT_MS, 'launching Chromium');
  return {
    version: `Chromium ${browser.version()}`,
    async open(url, { viewport = { width: 1280, height: 800 } } = {}) {
      const context = await browser.newContext({ viewport });
      const page = await context.newPage();
      return openEventPage(page, context, url, {
        warningType: 'warning',
        waitFor: (fn, arg, timeout) => page.waitForFunction(fn, arg, { timeout }),
      });
    },
    close: () => browser.close(),
  };
}

/**
 * A Firefox profile that has been started once: the first start of a fresh profile (databases, startup
 * cache) took 6-11 s here, a copy of a used one 2-3 s. Made once per checkout in build/, copied per launch.
 */
async function firefoxProfileTemplate(puppeteer) {
  const template = join(REPO_ROOT, 'build/firefox-profile');
  if (existsSync(join(template, 'prefs.js'))) return template;
  mkdirSync(join(REPO_ROOT, 'build'), { recursive: true });
  const fresh = mkdtempSync(join(REPO_ROOT, 'build/firefox-profile.tmp-'));
  const browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
    timeout: LAUNCH_TIMEOUT_MS,
    userDataDir: fresh,
  });
  await browser.close();
  try {
    renameSync(fresh, template); // atomic: a suite file that raced us and won keeps its copy
  } catch {
    rmSync(fresh, { recursive: true, force: true });
  }
  return template;
}

async function launchFirefoxEngine({ evaluateTimeoutMs }) {
  const { default: puppeteer } = await import('puppeteer-core');
  const profile = mkdtempSync(join(tmpdir(), 'mha-firefox-'));
  cpSync(await firefoxProfileTemplate(puppeteer), profile, {
    recursive: true,
    filter: (path) => !/[\\/]\.?(parent)?lock$/.test(path),
  });
  const browser = await puppeteer
    .launch({
      browser: 'firefox',
      executablePath: FIREFOX,
      headless: true,
      timeout: LAUNCH_TIMEOUT_MS,
      protocolTimeout: evaluateTimeoutMs,
      userDataDir: profile,
    })
    .catch((error) => {
      rmSync(profile, { recursive: true, force: true });
      throw error;
    });
  // Puppeteer ends Firefox when this process exits or is interrupted, but not when it is killed (SIGKILL,
  // a CI runner's timeout): Firefox then lives on. A guard ends it and deletes its profile copy then.
  const guard = guardPid(browser.process().pid, profile);
  return {
    version: `Firefox ${(await browser.version()).replace(/^firefox\//, '')}`,
    async open(url, { viewport = { width: 1280, height: 800 } } = {}) {
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      page.setDefaultTimeout(evaluateTimeoutMs);
      await page.setViewport(viewport);
      return openEventPage(page, context, url, {
        warningType: 'warn',
        waitFor: (fn, arg, timeout) => page.waitForFunction(fn, { timeout, polling: 100 }, arg),
      });
    },
    async close() {
      await withTimeout(browser.close(), 10_000, 'closing Firefox', () => browser.process()?.kill('SIGKILL')).catch(
        () => {},
      );
      guard.dismiss();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Launches engine `name` (a key of ENGINES). Resolves to { name, caps, version, open, close }; the
 * launch is bounded by a timeout on every engine, and so is a function run in a page on Firefox and
 * WebKit (`evaluateTimeoutMs`; the benchmark raises it).
 */
export async function launchEngine(name, { evaluateTimeoutMs = EVALUATE_TIMEOUT_MS } = {}) {
  const caps = ENGINES[name];
  if (!caps)
    throw new Error(`launchEngine: unknown engine "${name}" (expected one of ${Object.keys(ENGINES).join(', ')})`);
  const launched =
    name === 'chromium'
      ? await launchChromiumEngine()
      : name === 'firefox'
        ? await launchFirefoxEngine({ evaluateTimeoutMs })
        : await launchWebKitEngine(caps.env, { evaluateTimeoutMs });
  return { name, caps, ...launched };
}
