// The engine layer itself (scripts/lib/engines.mjs): nothing a launch starts (the browser and its
// processes; for WebKit also Xvfb and WebKitWebDriver; Firefox's profile copy) outlives the Node process
// that launched it, even when that process is killed with SIGKILL, and WebKit's close() ends all of it. The launches run in a
// child process (tests/browser/fixtures/launch-and-wait.mjs) whose descendants are read from /proc.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { selectedEngines } from '../../scripts/lib/engines.mjs';

const FIXTURE = fileURLToPath(new URL('fixtures/launch-and-wait.mjs', import.meta.url));

/** pid -> { ppid, name } of every live (not zombie) process. */
function processTable() {
  const table = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (state !== 'Z')
        table.set(Number(entry), {
          ppid: Number(ppid),
          name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
        });
    } catch {
      /* ended while we looked */
    }
  }
  return table;
}

function descendants(root) {
  const table = processTable();
  const found = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, { ppid }] of table) {
      if (found.has(ppid) && !found.has(pid)) {
        found.add(pid);
        grew = true;
      }
    }
  }
  found.delete(root);
  return [...found].map((pid) => ({ pid, name: table.get(pid).name }));
}

async function stillAlive(processes, withinMs) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const table = processTable();
    const alive = processes.filter((p) => table.get(p.pid)?.name === p.name);
    if (alive.length === 0 || Date.now() > deadline) return alive;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** The --profile directories on the command lines of `processes` (Firefox's copy of the profile). */
function firefoxProfilesOf(processes) {
  const dirs = new Set();
  for (const { pid } of processes) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      const at = args.indexOf('--profile');
      if (at >= 0) dirs.add(args[at + 1]);
    } catch {
      /* ended */
    }
  }
  return [...dirs];
}

async function gone(path, withinMs) {
  const deadline = Date.now() + withinMs;
  while (existsSync(path)) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return true;
}

/** Starts the fixture; `printed(line)` resolves once the child printed that line. */
function launchInChild(engine, mode) {
  const child = spawn(process.execPath, [FIXTURE, engine, mode], { stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  const waiting = [];
  const exited = new Promise((_, reject) =>
    child.once('exit', (code) => reject(new Error(`the launch exited early (${code}): ${output}`))),
  );
  exited.catch(() => {});
  const check = () => waiting.forEach(({ line, resolve }) => output.split('\n').includes(line) && resolve());
  child.stdout.on('data', (d) => {
    output += d;
    check();
  });
  child.stderr.on('data', (d) => {
    output += d;
  });
  const printed = (line) =>
    Promise.race([
      new Promise((resolve) => {
        waiting.push({ line, resolve });
        check();
      }),
      exited,
    ]);
  return { child, printed };
}

const WEBKIT_PROCESSES = ['Xvfb', 'WebKitWebDriver', 'MiniBrowser'];

for (const engine of selectedEngines().filter((name) => name !== 'webkit-flags')) {
  test(`${engine}: every process of a launch ends when the launching process is killed (SIGKILL)`, async () => {
    const { child, printed } = launchInChild(engine, 'wait');
    try {
      await printed('ready');
      const started = descendants(child.pid);
      assert.ok(started.length >= 1, 'the launch started no process');
      if (engine === 'webkit') {
        for (const name of WEBKIT_PROCESSES)
          assert.ok(
            started.some((p) => p.name === name),
            `no ${name} among ${started.map((p) => p.name)}`,
          );
      }
      const profiles = engine === 'firefox' ? firefoxProfilesOf(started) : [];
      if (engine === 'firefox') assert.equal(profiles.length, 1, 'the Firefox profile copy in use');
      child.kill('SIGKILL');
      const alive = await stillAlive(started, 10_000);
      assert.deepEqual(alive, [], `still running 10 s after SIGKILL (of ${started.map((p) => p.name).join(', ')})`);
      for (const dir of profiles) assert.equal(await gone(dir, 5_000), true, `${dir} left behind`);
    } finally {
      child.kill('SIGKILL');
    }
  });
}

if (selectedEngines().includes('webkit')) {
  test('webkit: close() ends MiniBrowser, WebKitWebDriver and the private Xvfb', async () => {
    const { child, printed } = launchInChild('webkit', 'close');
    try {
      await printed('ready');
      const started = descendants(child.pid);
      for (const name of WEBKIT_PROCESSES)
        assert.ok(
          started.some((p) => p.name === name),
          `no ${name} among ${started.map((p) => p.name)}`,
        );
      child.stdin.write('close\n');
      await printed('closed');
      // The child still runs: only close() can have ended them.
      assert.deepEqual(await stillAlive(started, 5_000), [], 'left running after close()');
    } finally {
      child.kill('SIGKILL');
    }
  });
}
