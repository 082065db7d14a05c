#!/usr/bin/env node
// Removes the "name" custom section (function names for stack traces) from a wasm file, in place. The
// relaxed-SIMD modules are linked at -O1 without binaryen (CMakeLists.txt), so nothing else strips it;
// it is a third of their size. wasm-ld's --strip-all would drop target_features too, which Emscripten
// reads after linking. Usage: node scripts/wasm-drop-names.mjs <file.wasm | its glue file.js>...
import fs from 'node:fs';

function readU32Leb(bytes, at) {
  let value = 0;
  for (let shift = 0; ; shift += 7) {
    const byte = bytes[at++];
    value += (byte & 0x7f) * 2 ** shift;
    if ((byte & 0x80) === 0) return { value, next: at };
  }
}

for (const given of process.argv.slice(2)) {
  const file = given.replace(/\.js$/, '.wasm');
  const bytes = fs.readFileSync(file);
  if (bytes.readUInt32BE(0) !== 0x0061736d) throw new Error(`${file} is not a wasm file`);
  const kept = [bytes.subarray(0, 8)];
  for (let at = 8; at < bytes.length;) {
    const id = bytes[at];
    const size = readU32Leb(bytes, at + 1);
    const end = size.next + size.value;
    let isName = false;
    if (id === 0) {
      const nameLength = readU32Leb(bytes, size.next);
      isName = bytes.toString('utf8', nameLength.next, nameLength.next + nameLength.value) === 'name';
    }
    if (!isName) kept.push(bytes.subarray(at, end));
    at = end;
  }
  fs.writeFileSync(file, Buffer.concat(kept));
}
