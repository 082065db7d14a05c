// WebKitGTK's MiniBrowser as an engine of scripts/lib/engines.mjs: selenium-webdriver and WebKitWebDriver on
// a private Xvfb display, each started under a guard that ends it with this process. Classic WebDriver
// shows no console or network events: the page hooks of the test server (engines.mjs) record them in the
// page, and the servers' log (engine-support.mjs) gives the failed requests.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { LAUNCH_TIMEOUT_MS, isFavicon, responseLog, withTimeout } from './engine-support.mjs';

const WEBKIT_DRIVER = '/usr/bin/WebKitWebDriver';
const MINIBROWSER = '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';

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

export async function launchWebKitEngine(env, { evaluateTimeoutMs }) {
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
