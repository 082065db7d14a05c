// ropeTables (docs/spec.md 4.5) against the tables of the v3 golden set (tests/golden/generate.py computes
// them in float64 with PyTorch), and its argument checks.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ropeTables } from '../../dist/index.js';

const v3 = new URL('../golden/v3/', import.meta.url);
const floats = (file) => {
  const b = readFileSync(new URL(file, v3));
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};

test("ropeTables equals the golden set's float64 tables rounded to float32", () => {
  const cases = JSON.parse(readFileSync(new URL('cases.json', v3), 'utf8')).filter((c) => c.options?.rope);
  assert.ok(cases.length >= 6);
  let values = 0,
    exact = 0;
  for (const c of cases) {
    const { rotaryDim, theta, scale, positions, cos, sin } = c.options.rope;
    const tables = ropeTables({ rotaryDim, positions, theta, scale });
    for (const [mine, golden] of [
      [tables.cos, floats(c.files[cos])],
      [tables.sin, floats(c.files[sin])],
    ]) {
      assert.equal(mine.length, golden.length, c.name);
      for (let i = 0; i < mine.length; ++i) {
        // V8's and glibc's pow and cos may differ in the last bit of a double, which rounding to float32
        // almost always removes: at most one float32 step apart.
        const step = Math.abs(Math.fround(golden[i] * (1 + 2 ** -23)) - golden[i]) || 2 ** -149;
        assert.ok(Math.abs(mine[i] - golden[i]) <= step, `${c.name}[${i}]: ${mine[i]} vs ${golden[i]}`);
        exact += mine[i] === golden[i] ? 1 : 0;
        ++values;
      }
    }
  }
  assert.ok(exact >= values * 0.999, `${exact} of ${values} values exact`);
});

test('ropeTables: defaults, shape and row 0', () => {
  const { cos, sin } = ropeTables({ rotaryDim: 4, positions: 3 });
  assert.equal(cos.length, 6);
  assert.deepEqual([...cos.subarray(0, 2)], [1, 1]);
  assert.deepEqual([...sin.subarray(0, 2)], [0, 0]);
  assert.equal(cos[2], Math.fround(Math.cos(1)));
  assert.equal(sin[3], Math.fround(Math.sin(10000 ** -0.5)));
});

test('ropeTables: bad options are TypeError/RangeError naming the option', () => {
  const bad = [
    [undefined, TypeError, 'ropeTables: expected an options object'],
    [{ rotaryDim: 3, positions: 4 }, RangeError, 'ropeTables: rotaryDim: expected an even integer'],
    [{ rotaryDim: '4', positions: 4 }, TypeError, 'ropeTables: rotaryDim: expected a positive integer'],
    [{ rotaryDim: 4, positions: 0 }, RangeError, 'ropeTables: positions'],
    [
      { rotaryDim: 4, positions: 4, theta: 1 },
      RangeError,
      'ropeTables: theta: expected a finite number above 1, got 1',
    ],
    [{ rotaryDim: 4, positions: 4, scale: 0 }, RangeError, 'ropeTables: scale'],
    [{ rotaryDim: 4, positions: 4, scale: NaN }, RangeError, 'ropeTables: scale'],
    [{ rotaryDim: 4, positions: 4, base: 2 }, TypeError, 'unknown option "base"'],
    [{ rotaryDim: 2 ** 16, positions: 2 ** 16 }, RangeError, 'fewer than 2^31'],
  ];
  for (const [options, type, text] of bad) {
    assert.throws(
      () => ropeTables(options),
      (e) => e instanceof type && e.message.includes(text),
      JSON.stringify(options),
    );
  }
});
