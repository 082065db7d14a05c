// Which function bodies two builds of a wasm module have in common: for a change that should not touch a
// kernel, that its functions come out the same. Function and global indices are blanked, so a function
// that only moved in the index space still matches.
//
//   node scripts/wasm-func-diff.mjs [--ignore-addresses] OLD.wasm NEW.wasm
//
// Prints the count of bodies only in OLD, only in NEW and in both, and the sizes (in wat lines) of the
// largest unmatched ones on each side. Needs wasm2wat (Debian's wabt, installed by the bootstrap).
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';

function bodies(file) {
  const wat = execFileSync('wasm2wat', ['--enable-all', '--no-check', file], { maxBuffer: 1 << 30 }).toString();
  const funcs = wat.split(/\n  \(func /).slice(1);
  const counts = new Map();
  for (const text of funcs) {
    const end = text.indexOf('\n  (');
    const body = (end >= 0 ? text.slice(0, end) : text)
      .replace(/^[^\n]*\n/, '') // the signature line names the function's own index
      .replace(/\b(call|global\.get|global\.set|ref\.func) \d+/g, '$1 _')
      // With --ignore-addresses, also static data addresses (i32.const in [1024, 2^20): where a change moved
      // the module's data) and load/store offsets (where it moved a struct's fields).
      .replace(ignoreAddresses ? / offset=\d+/g : /$^/, ' offset=_')
      .replace(ignoreAddresses ? /i32\.const (\d+)/g : /$^/, (m, n) => (n >= 1024 && n < 1 << 20 ? 'i32.const _' : m));
    const hash = crypto.createHash('sha256').update(body).digest('hex');
    const entry = counts.get(hash) ?? { n: 0, lines: body.split('\n').length };
    entry.n += 1;
    counts.set(hash, entry);
  }
  return counts;
}

const ignoreAddresses = process.argv.includes('--ignore-addresses');
const [oldFile, newFile] = process.argv.slice(2).filter((arg) => !arg.startsWith('--'));
if (!oldFile || !newFile) {
  console.error('usage: node scripts/wasm-func-diff.mjs OLD.wasm NEW.wasm');
  process.exit(2);
}
const [a, b] = [bodies(oldFile), bodies(newFile)];
const unmatched = (x, y) => {
  const out = [];
  for (const [hash, { n, lines }] of x) for (let i = y.get(hash)?.n ?? 0; i < n; i++) out.push(lines);
  return out.sort((p, q) => q - p);
};
const onlyOld = unmatched(a, b);
const onlyNew = unmatched(b, a);
const total = [...b.values()].reduce((s, e) => s + e.n, 0);
console.log(`${newFile}: ${total - onlyNew.length} of ${total} function bodies as in ${oldFile}`);
console.log(`only in old: ${onlyOld.length} (largest, wat lines: ${onlyOld.slice(0, 8).join(', ')})`);
console.log(`only in new: ${onlyNew.length} (largest, wat lines: ${onlyNew.slice(0, 8).join(', ')})`);
