// Summarizes an A/B of bench/ab-trees.sh: for every timed row (stateless shapes and job contestants), the
// median of its A runs (1-a, 4-a) against its B runs (2-b, 3-b), as B's speed over A (> 1: B faster), with
// the spread of the four runs' medians, so that a drift of the machine shows as disagreeing pairs.
//
//   node bench/ab-compare.mjs [dir]     (dir: ab-trees.sh's out, default /tmp/ab)
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2] ?? '/tmp/ab';
const runs = ['1-a', '2-b', '3-b', '4-a'].map((name) => {
  const file = path.join(dir, name, 'latest.json');
  return { name, json: JSON.parse(fs.readFileSync(file, 'utf8')) };
});

/** Row name -> median ms of one run: stateless results and every job contestant. */
function medians(json) {
  const rows = new Map();
  for (const r of json.results ?? []) {
    const s = r.samplesMs;
    if (r.status === 'ok' && s?.length) rows.set(`${r.shape} · ${r.impl}`, median(s) / (r.callsPerSample ?? 1));
  }
  for (const job of json.jobs ?? []) {
    for (const c of job.contestants ?? []) {
      if (Number.isFinite(c.medianMs)) rows.set(`${job.job} · ${c.name}`, c.medianMs);
    }
  }
  return rows;
}

function median(values) {
  const s = [...values].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const tables = runs.map((r) => medians(r.json));
console.log(`| row | A ms (1-a, 4-a) | B ms (2-b, 3-b) | B speed / A | range over pairs |`);
console.log(`| --- | ---: | ---: | ---: | ---: |`);
const ratios = [];
for (const row of tables[0].keys()) {
  const ms = tables.map((t) => t.get(row));
  if (ms.some((x) => !Number.isFinite(x))) continue;
  const [a1, b1, b2, a2] = ms;
  const a = (a1 + a2) / 2;
  const b = (b1 + b2) / 2;
  const pairs = [a1 / b1, a1 / b2, a2 / b1, a2 / b2];
  ratios.push(a / b);
  const f = (x) => (x < 1 ? x.toFixed(4) : x.toFixed(3));
  console.log(
    `| ${row} | ${f(a1)}, ${f(a2)} | ${f(b1)}, ${f(b2)} | ${(a / b).toFixed(3)} | ` +
      `${Math.min(...pairs).toFixed(3)} – ${Math.max(...pairs).toFixed(3)} |`,
  );
}
console.log(
  `\n${ratios.length} rows; median B speed / A ${median(ratios).toFixed(3)} ` +
    `(min ${Math.min(...ratios).toFixed(3)}, max ${Math.max(...ratios).toFixed(3)})`,
);
