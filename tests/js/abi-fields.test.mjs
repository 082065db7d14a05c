// One source per fact for the call ABI: the field lists of src/call_abi.hpp give the C++ structs, the
// modules' layout tables and web/src/abi-fields.generated.ts (scripts/gen-abi.mjs). The checked-in file is
// what the header gives; the modules' layouts have the header's fields in its order; and the one layout
// reader of web/src/call-abi.ts (tsc's output in build/ts) refuses a module whose struct differs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import createMhaModule from '../../dist/mha.js';
import { generate, HEADER, OUTPUT, parseFields } from '../../scripts/gen-abi.mjs';
import { readCacheCallLayout, readCallLayout } from '../../build/ts/call-abi.js';
import { repoRoot } from './helpers.mjs';

const header = fs.readFileSync(path.join(repoRoot, HEADER), 'utf8');
const wasm = await createMhaModule({ wasmBinary: fs.readFileSync(path.join(repoRoot, 'dist/mha.wasm')) });

test(`${OUTPUT} is what scripts/gen-abi.mjs makes of ${HEADER}`, () => {
  assert.equal(
    fs.readFileSync(path.join(repoRoot, OUTPUT), 'utf8'),
    generate(header),
    `${OUTPUT} is stale: run \`node scripts/gen-abi.mjs\``,
  );
});

test('the generator refuses a list it cannot read (a field that is not 4 bytes, a repeated name)', () => {
  const list = (...lines) => `#define MHA_ATTENTION_CALL_FIELDS(X) \\\n${lines.join(' \\\n')}\n`;
  assert.throws(() => parseFields(list('  X(double, scale, "no")'), 'MHA_ATTENTION_CALL_FIELDS'), /4-byte type/);
  assert.throws(
    () => parseFields(list('  X(int32_t, a, "")', '  X(int32_t, a, "")'), 'MHA_ATTENTION_CALL_FIELDS'),
    /distinct/,
  );
  assert.throws(() => parseFields('', 'MHA_ATTENTION_CALL_FIELDS'), /no #define/);
});

for (const [macro, layoutOf, read] of [
  ['MHA_ATTENTION_CALL_FIELDS', () => wasm.attentionCallLayout(), readCallLayout],
  ['MHA_CACHE_ATTEND_CALL_FIELDS', () => wasm.kvCacheAttendCallLayout(), readCacheCallLayout],
]) {
  const names = parseFields(header, macro).map((f) => f.name);

  test(`${macro}: the module's struct has the header's fields, in its order, 4 bytes apart`, () => {
    const { size, ...offsets } = layoutOf();
    assert.deepEqual(Object.keys(offsets), names);
    assert.deepEqual(
      Object.values(offsets),
      names.map((_, i) => 4 * i),
    );
    assert.equal(size, 4 * names.length);
  });

  test(`${macro}: the layout reader takes the module's layout and refuses any other`, () => {
    const good = layoutOf();
    const withLayout = (offsets) => ({ attentionCallLayout: () => offsets, kvCacheAttendCallLayout: () => offsets });
    const layout = read(withLayout(good));
    assert.equal(typeof layout, 'object');
    assert.deepEqual(Object.keys(layout), [...names, 'bytes']);
    for (const name of names) assert.equal(layout[name], good[name] / 4);
    const { [names[0]]: _dropped, ...without } = good;
    const cases = [
      [{ ...without, size: good.size - 4 }, new RegExp(`without ${names[0]}`)],
      [{ ...good, extra: good.size, size: good.size + 4 }, /with extra/],
      [{ ...good, size: good.size + 4 }, /is \d+ bytes, expected/],
      [{ ...good, [names[1]]: good[names[0]] }, new RegExp(`field ${names[1]} at byte offset 0`)],
      [{ ...good, [names[1]]: 2 }, new RegExp(`field ${names[1]} at byte offset 2`)],
      [{ ...good, [names[1]]: good.size }, new RegExp(`field ${names[1]} at byte offset ${good.size}`)],
    ];
    for (const [offsets, message] of cases) assert.match(String(read(withLayout(offsets))), message);
  });
}
