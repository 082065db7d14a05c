// bert-b8 (8,128,128,768,12) on 1 and 2 threads in copy mode (Float32Array arguments, copied into the
// heap and out each call) and heap-tensor mode (nothing copied: the computation alone), and the copies
// alone (q, k, v into a shared heap; the result into a fresh array), interleaved in one process, medians
// and quartiles of wall times and of per-round ratios. Every call starts with the pools' workers asleep.
//   [AFTER_FIRST=1] [MODES=...] node bench/copy-overlap.mjs [rounds] [beforeDist]
// beforeDist: another build's dist/ (e.g. main's) whose copy-mode calls run beside this one's ("before");
// without it the "before" rows run this build's too.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { mulberry32, randomNormal } from '../scripts/lib/prng.mjs';
const here = path.dirname(fileURLToPath(import.meta.url));
const [roundsArg, beforeArg] = process.argv.slice(2);
const afterDir = path.join(here, '../dist');
const beforeDir = beforeArg ? path.resolve(beforeArg) : afterDir;
const load = async (dir) => (await import(pathToFileURL(`${dir}/index.js`).href)).createMHA;
const [before, after] = [await load(beforeDir), await load(afterDir)];
const B = 8,
  S = 128,
  T = 128,
  D = 768,
  H = 12;
const n = B * S * D;
const [q, k, v] = [1, 2, 3].map((seed) => randomNormal(n, mulberry32(seed)));
const opts = { batch: B, seqLen: S, kvSeqLen: T, dModel: D, numHeads: H };
// Instances created first measured a few % faster here (seen on the seed shape): AFTER_FIRST=1 swaps the
// order, and the two runs' ratios together cancel that bias.
const inst = {};
for (const key of process.env.AFTER_FIRST ? ['a1', 'b1', 'a2', 'b2'] : ['b1', 'a1', 'b2', 'a2']) {
  inst[key] = await (key[0] === 'a' ? after : before)({ threads: Number(key[1]) });
}
const heapT = (m) => {
  const t = [q, k, v].map((a) => {
    const x = m.allocate(a.length);
    x.set(a);
    return x;
  });
  return { t, o: { ...opts, out: m.allocate(n) } };
};
const h1 = heapT(inst.a1),
  h2 = heapT(inst.a2);
// The "before" instances get the same heap tensors (unused): with them in the "after" instances only, the
// two builds' staging lands at different heap addresses, which alone made "1t copy after" 14-16% slower.
heapT(inst.b1);
heapT(inst.b2);
const scratch = inst.a2.allocate(4 * n);
const modes = {
  '1t copy before': () => inst.b1.multiHeadAttention(q, k, v, opts),
  '1t copy after': () => inst.a1.multiHeadAttention(q, k, v, opts),
  '2t copy before': () => inst.b2.multiHeadAttention(q, k, v, opts),
  '2t copy after': () => inst.a2.multiHeadAttention(q, k, v, opts),
  '1t heap': () => inst.a1.multiHeadAttention(...h1.t, h1.o),
  '2t heap': () => inst.a2.multiHeadAttention(...h2.t, h2.o),
  'copy-in q,k,v (shared heap)': () => {
    const d = scratch.data;
    d.set(q, 0);
    d.set(k, n);
    d.set(v, 2 * n);
  },
  'copy-out (fresh array)': () => {
    const r = new Float32Array(n);
    r.set(scratch.data.subarray(3 * n, 4 * n));
    return r;
  },
};
const rounds = Number(roundsArg ?? 60);
// MODES=name,name,... measures only those rows (the ratios need both of theirs).
const names = process.env.MODES ? process.env.MODES.split(',') : Object.keys(modes);
const times = Object.fromEntries(names.map((x) => [x, []]));
for (const x of names) if (!modes[x]) throw new Error(`unknown mode ${x}`);
const pause = new Int32Array(new SharedArrayBuffer(4));
for (let r = -10; r < rounds; r++) {
  const order = r % 2 ? names : [...names].reverse();
  for (const name of order) {
    Atomics.wait(pause, 0, 0, 2); // every call starts with the pools' workers asleep
    const t0 = performance.now();
    modes[name]();
    const t = performance.now() - t0;
    if (r >= 0) times[name].push(t);
  }
}
const stats = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return [s[s.length >> 1], s[Math.floor(s.length / 4)], s[Math.floor((s.length * 3) / 4)]];
};
const fmt = ([m, a, b], d = 2) => `${m.toFixed(d)} [${a.toFixed(d)}, ${b.toFixed(d)}]`;
for (const name of names) console.log(`${name.padEnd(30)} ${fmt(stats(times[name]))} ms`);
const ratio = (a, b) => (times[a] && times[b] ? fmt(stats(times[a].map((t, i) => t / times[b][i])), 3) : '-');
console.log('per-round ratios, median [q1, q3]:');
console.log(`  copy before 1t/2t  ${ratio('1t copy before', '2t copy before')}`);
console.log(`  copy after  1t/2t  ${ratio('1t copy after', '2t copy after')}`);
console.log(`  heap        1t/2t  ${ratio('1t heap', '2t heap')}`);
console.log(`  2t before/after    ${ratio('2t copy before', '2t copy after')}`);
console.log(`  1t after/before    ${ratio('1t copy after', '1t copy before')}`);
const bits = (x) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
const ref = inst.b1.multiHeadAttention(q, k, v, opts);
for (const key of ['a1', 'b2', 'a2'])
  if (Buffer.compare(bits(ref), bits(inst[key].multiHeadAttention(q, k, v, opts))) !== 0)
    console.log(`BITS DIFFER: ${key}`);
for (const m of Object.values(inst)) m.dispose();
