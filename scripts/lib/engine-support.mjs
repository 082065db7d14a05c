// What the engine launchers of scripts/lib/engines.mjs and scripts/lib/engine-webkit.mjs share: their time
// limits, the test servers' log of failed responses (WebKit's only view of failed requests) and a timeout
// wrapper, and the guard that ends a browser with this process. Imports nothing of theirs.
import { spawn } from 'node:child_process';

/** Longest wait for a browser to start, a display to come up or a WebDriver session to open. */
export const LAUNCH_TIMEOUT_MS = 60_000;
/** Longest a function run in the page may take (a golden case, a threads start-up). */
export const EVALUATE_TIMEOUT_MS = 120_000;

/** Failed responses of every test server of this process, in order: { at, status, url }. */
export const responseLog = [];

/** A browser's request for /favicon.ico (Firefox and WebKit ask for one): not a problem when it fails. */
export const isFavicon = (url) => new URL(url).pathname === '/favicon.ico';

/** Rejects with a message naming `what` when `promise` takes longer than `ms`; `onTimeout` cleans up. */
export function withTimeout(promise, ms, what, onTimeout = () => {}) {
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

/**
 * Kills process `pid` when this Node process dies in any way, then deletes `dir`: a shell waits on a pipe
 * from us and acts on end of file. dismiss() stops the guard without touching either (after a normal close).
 */
export function guardPid(pid, dir) {
  const script = 'read -r _; kill -KILL "$1" 2>/dev/null; while [ -d "/proc/$1" ]; do sleep 0.1; done; rm -rf "$2"';
  const guard = spawn('sh', ['-c', script, 'guard', String(pid), dir], { stdio: ['pipe', 'ignore', 'ignore'] });
  guard.unref();
  guard.stdin.unref?.();
  return { dismiss: () => guard.kill('SIGKILL') };
}
