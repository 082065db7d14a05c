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
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHandler, ISOLATION_HEADERS, REPO_ROOT } from '../serve.mjs';
import { launchChromium } from './chromium.mjs';

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
const WEBKIT_DRIVER = '/usr/bin/WebKitWebDriver';
const MINIBROWSER = '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';
/** Longest wait for a browser to start, a display to come up or a WebDriver session to open. */
export const LAUNCH_TIMEOUT_MS = 60_000;
/** Longest a function run in the page may take (a golden case, a threads start-up). */
export const EVALUATE_TIMEOUT_MS = 120_000;

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

/** Failed responses of every test server of this process, in order: { at, status, url }. */
const responseLog = [];

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

const isFavicon = (url) => new URL(url).pathname === '/favicon.ico';

// ---------------------------------------------------------------------------------------------------------
// Engines. Each launcher returns { name, version, open(url, {viewport}) -> page, close() }, where a page is
// { url(), evaluate(fn, arg), waitFor(fn, arg, {timeout}), problems(), warnings(), native, close() }.

/** Rejects with a message naming `what` when `promise` takes longer than `ms`; `onTimeout` cleans up. */
function withTimeout(promise, ms, what, onTimeout = () => {}) {
  let timer;
  return Promise.race([
    Promise.resolve(promise).finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => {
        onTimeout();
        reject(new Error(`${what}: no answer within ${ms / 1000} s`));
      }, ms);
    }),
  ]);
}

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
 * Starts `command args` under a guard shell that kills it as soon as our end of its stdin closes: when
 * stop() is called, and also when this Node process ends in any way (even SIGKILL: the kernel closes
 * the pipe), so no Xvfb or WebKitWebDriver outlives a test run. The guard prints the command's pid first;
 * `fd3` adds a pipe as fd 3.
 */
function spawnGuarded(command, args, { env = process.env, fd3 = false } = {}) {
  const guard =
    '"$@" & child=$!\necho "$child"\nread -r _ || true\nkill "$child" 2>/dev/null\nwait "$child" 2>/dev/null\nexit 0\n';
  const proc = spawn('sh', ['-c', guard, 'guard', command, ...args], {
    env,
    stdio: ['pipe', 'pipe', 'pipe', ...(fd3 ? ['pipe'] : [])],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => {
    stderr = (stderr + d).slice(-2000);
  });
  proc.stdin.on('error', () => {}); // EPIPE when the guard has already gone
  let childPid;
  proc.stdout.once('data', (d) => {
    childPid = Number(String(d).split('\n')[0]);
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  return {
    proc,
    exited,
    stderr: () => stderr,
    async stop() {
      proc.stdin.end();
      await withTimeout(exited, 10_000, `stopping ${command}`, () => proc.kill('SIGKILL')).catch(() => {
        try {
          if (childPid) process.kill(childPid, 'SIGKILL');
        } catch {
          /* gone */
        }
      });
    },
  };
}

/**
 * Kills process `pid` when this Node process dies in any way, then deletes `dir`: a shell waits on a pipe
 * from us and acts on end of file. dismiss() stops the guard without touching either (after a normal close).
 */
function guardPid(pid, dir) {
  const script = 'read -r _; kill -KILL "$1" 2>/dev/null; while [ -d "/proc/$1" ]; do sleep 0.1; done; rm -rf "$2"';
  const guard = spawn('sh', ['-c', script, 'guard', String(pid), dir], { stdio: ['pipe', 'ignore', 'ignore'] });
  guard.unref();
  guard.stdin.unref?.();
  return { dismiss: () => guard.kill('SIGKILL') };
}

/** A private X display: Xvfb picks a free display number and writes it to fd 3 (-displayfd). */
async function startXvfb() {
  const xvfb = spawnGuarded('Xvfb', ['-displayfd', '3', '-nolisten', 'tcp', '-screen', '0', '1280x800x24'], {
    fd3: true,
  });
  const display = new Promise((resolve, reject) => {
    let text = '';
    xvfb.proc.stdio[3].on('data', (d) => {
      text += d;
      if (text.includes('\n')) resolve(`:${text.trim()}`);
    });
    xvfb.proc.once('exit', () => reject(new Error(`Xvfb exited before it opened a display: ${xvfb.stderr()}`)));
  });
  try {
    return { display: await withTimeout(display, LAUNCH_TIMEOUT_MS, 'starting Xvfb'), stop: () => xvfb.stop() };
  } catch (error) {
    await xvfb.stop();
    throw error;
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Resolves once WebKitWebDriver answers on `port`; rejects when it exits or LAUNCH_TIMEOUT_MS passes. */
async function waitForDriver(port, driverProcess) {
  let exited = false;
  driverProcess.exited.then(() => {
    exited = true;
  });
  const deadline = Date.now() + LAUNCH_TIMEOUT_MS;
  for (;;) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/status`);
      if (r.ok) return;
    } catch {
      /* not listening yet */
    }
    if (exited) throw new Error(`WebKitWebDriver exited: ${driverProcess.stderr()}`);
    if (Date.now() > deadline)
      throw new Error(`starting WebKitWebDriver: no answer within ${LAUNCH_TIMEOUT_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Runs `fn(arg)` in the page through executeAsyncScript: a rejection comes back as { error }. */
function runInWebKit(driver, fn, arg) {
  const script = `const done = arguments[arguments.length - 1];
    Promise.resolve().then(() => (${fn})(arguments[0])).then(
      (value) => done({ value: value === undefined ? null : value }),
      (e) => done({ error: (e && e.constructor && e.constructor.name || 'Error') + ': ' + (e && e.message || String(e)) }));`;
  return driver.executeAsyncScript(script, arg ?? null).then((r) => {
    if (r && typeof r === 'object' && 'error' in r) throw new Error(`in the page: ${r.error}`);
    return r?.value;
  });
}

async function launchWebKitEngine(env, { evaluateTimeoutMs }) {
  const { Builder } = await import('selenium-webdriver');
  const stops = [];
  const stopAll = async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch(() => {});
  };
  try {
    const xvfb = await startXvfb();
    stops.push(xvfb.stop);
    const port = await freePort();
    const driverProcess = spawnGuarded(WEBKIT_DRIVER, [`--port=${port}`, '--host=127.0.0.1'], {
      env: { ...process.env, DISPLAY: xvfb.display, ...env },
    });
    stops.push(driverProcess.stop);
    await waitForDriver(port, driverProcess);
    // Without a usable display the session never opens: the timeout is what ends such a launch.
    const driver = await withTimeout(
      new Builder()
        .usingServer(`http://127.0.0.1:${port}`)
        .withCapabilities({
          browserName: 'MiniBrowser',
          'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] },
        })
        .build(),
      LAUNCH_TIMEOUT_MS,
      `opening a WebKitWebDriver session on display ${xvfb.display}`,
    );
    stops.push(() => withTimeout(driver.quit(), 10_000, 'closing MiniBrowser'));
    await driver.manage().setTimeouts({ script: evaluateTimeoutMs, pageLoad: LAUNCH_TIMEOUT_MS });
    const capabilities = await driver.getCapabilities();
    return {
      version: `WebKitGTK ${capabilities.get('browserVersion')} (MiniBrowser)`,
      async open(url, { viewport = { width: 1280, height: 800 } } = {}) {
        await driver
          .manage()
          .window()
          .setRect({ x: 0, y: 0, ...viewport });
        const since = performance.now();
        await driver.get(url);
        const log = () =>
          runInWebKit(
            driver,
            () =>
              globalThis.__mhaTestLog ?? {
                problems: ['console.error: the page has no test hooks (not served by startTestServer)'],
                warnings: [],
              },
          );
        return {
          native: driver,
          url: () => driver.getCurrentUrl(),
          evaluate: (fn, arg) => runInWebKit(driver, fn, arg),
          async waitFor(fn, arg, { timeout = 30_000 } = {}) {
            const deadline = Date.now() + timeout;
            while (!(await runInWebKit(driver, fn, arg))) {
              if (Date.now() > deadline) throw new Error(`waitFor: ${fn} still false after ${timeout} ms`);
              await new Promise((resolve) => setTimeout(resolve, 100));
            }
          },
          async problems() {
            const http = responseLog
              .filter((r) => r.at >= since && !isFavicon(r.url))
              .map((r) => `HTTP ${r.status}: ${r.url}`);
            return [...(await log()).problems, ...http];
          },
          warnings: async () => (await log()).warnings,
          close: () => driver.get('about:blank'),
        };
      },
      close: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
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
