// The JavaScriptCore shell (/usr/bin/jsc, Debian's libjavascriptcoregtk-4.0-bin): the SIMD and baseline
// builds run the golden sets (scripts/lib/golden-runner.mjs) through createMHA({ wasmBinary }) in
// WebKit's JavaScript engine without a browser around it. jsc exits 0 even when the promise it waits on
// never settles, so a run passes only when its last line is "done".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { GOLDEN_SETS } from '../../scripts/lib/golden-runner.mjs';
import { repoRoot } from '../js/helpers.mjs';

const JSC = '/usr/bin/jsc';
const RUN_TIMEOUT_MS = 120_000;

function runJsc(build) {
  return new Promise((resolve) => {
    execFile(
      JSC,
      ['-m', 'tests/jsc/golden.jsc.mjs', '--', build],
      { cwd: repoRoot, timeout: RUN_TIMEOUT_MS, maxBuffer: 64 << 20 },
      (error, stdout, stderr) =>
        resolve({ code: error ? (error.code ?? error.signal) : 0, killed: error?.killed === true, stdout, stderr }),
    );
  });
}

for (const [build, simd] of [
  ['simd', true],
  ['baseline', false],
]) {
  test(`jsc: the ${build} build runs the golden sets ${GOLDEN_SETS.join(', ')} within the spec's tolerances and prints "done"`, async (t) => {
    const r = await runJsc(build);
    const lines = r.stdout.split('\n').filter(Boolean);
    assert.equal(r.killed, false, `jsc still running after ${RUN_TIMEOUT_MS / 1000} s`);
    assert.equal(r.code, 0, `jsc exited with ${r.code}: ${r.stdout.slice(-2000)}${r.stderr.slice(-2000)}`);
    assert.equal(
      lines.at(-1),
      'done',
      `the last line is not "done" (a promise that never settled?): ${r.stdout.slice(-2000)}`,
    );
    const other = lines.filter((l) => l !== 'done' && !l.startsWith('result '));
    assert.deepEqual(other, [], 'jsc printed console messages or errors');
    const results = lines.filter((l) => l.startsWith('result ')).map((l) => JSON.parse(l.slice('result '.length)));
    assert.deepEqual(
      results.map((x) => x.set),
      [...GOLDEN_SETS],
    );
    for (const { set, info, results: cases } of results) {
      assert.equal(info.build, build);
      assert.equal(info.simd, simd);
      const names = JSON.parse(readFileSync(`${repoRoot}/tests/golden/${set}/cases.json`, 'utf8')).map((c) => c.name);
      assert.deepEqual(
        cases.map((x) => x.name),
        names,
      );
      const failed = cases.flatMap((x) =>
        x.checks.filter((c) => !c.pass).map((c) => `${x.name}: ${JSON.stringify(c)}`),
      );
      assert.deepEqual(failed, [], `golden ${set} in jsc`);
      t.diagnostic(
        `golden ${set}: ${cases.length} cases, ${cases.reduce((n, x) => n + x.checks.length, 0)} checks passed`,
      );
    }
  });
}
