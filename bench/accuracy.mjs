// `node bench/accuracy.mjs [--relaxed]`: how close each build comes to PyTorch on the golden sets, per
// case family, as the ratio of the worst error to the tolerance of docs/spec.md (1 = at the limit). The
// tests only say pass or fail; this says by how much. With --relaxed (Node needs
// --experimental-wasm-relaxed-simd) the relaxed-simd build is measured too.
//
// Columns: out err/tol (max |out - out64| over max(1e-5·max(1, max|out64|), 2·max|out32 - out64|)),
// weights max |w - w64| (limit 1e-5), lse worst |lse - lse64| / (1e-5·max(1, |lse64|)) (limit 1).
import { createMHA } from '../dist/index.js';
import { checkLse, checkOut, checkWeights } from '../scripts/lib/golden-runner.mjs';
import { goldenDir, goldenOptions, goldenV2Dir, loadGoldenCases, readGolden } from '../scripts/lib/golden.mjs';

const withRelaxed = process.argv.includes('--relaxed');
const BUILDS = [
  ['simd', { simd: 'fixed' }],
  ['baseline', { simd: false }],
  ['simd-threads', { simd: 'fixed', threads: 2 }],
];
if (withRelaxed) BUILDS.push(['relaxed-simd', {}]);

/** A case's family: its name up to the first dims token (`_b2`, `_q3`), e.g. `bias_broadcast`. */
const familyOf = (c, set) => `${set} ${c.name.replace(/_(b|q|s)\d.*$/, '')}`;

const sets = [
  ['v1', loadGoldenCases(goldenDir)],
  ['v2', loadGoldenCases(goldenV2Dir).filter((c) => c.kind !== 'cache')],
];
const families = new Map(); // family -> build -> worst ratios
for (const [build, createOptions] of BUILDS) {
  const mha = await createMHA(createOptions);
  if (mha.info.build !== build) throw new Error(`asked for ${build}, createMHA gave ${mha.info.build}`);
  for (const [set, cases] of sets) {
    for (const c of cases) {
      const [q, k, v, out64, out32] = ['q', 'k', 'v', 'out64', 'out32'].map((role) => readGolden(c, role));
      const options = goldenOptions(c); // v1 cases have no options, only dims and perhaps a mask
      const lse64 = c.files.lse64 ? readGolden(c, 'lse64') : undefined;
      const lse = lse64 ? new Float32Array(lse64.length) : undefined;
      const out = checkOut(mha.multiHeadAttention(q, k, v, { ...options, lse }), out64, out32);
      const weights = c.files.weights64
        ? checkWeights(mha.attentionWeights(q, k, { ...options }), readGolden(c, 'weights64'))
        : undefined;
      const lseCheck = lse ? checkLse(lse, lse64) : undefined;
      if (!out.ok || (weights && !weights.ok) || (lseCheck && !lseCheck.ok)) {
        throw new Error(`${build} ${set} ${c.name}: ${out.problem ?? weights?.problem ?? lseCheck?.problem}`);
      }
      const key = familyOf(c, set);
      if (!families.has(key)) families.set(key, new Map());
      const row = families.get(key);
      const prev = row.get(build) ?? { out: 0, weights: 0, lse: 0, cases: 0 };
      row.set(build, {
        out: Math.max(prev.out, out.ratio),
        weights: Math.max(prev.weights, weights?.maxError ?? 0),
        lse: Math.max(prev.lse, lseCheck?.ratio ?? 0),
        cases: prev.cases + 1,
      });
    }
  }
  mha.dispose();
}

const cell = (x) => (x === 0 ? '0' : x.toExponential(1));
console.log(`| family (cases) | ${BUILDS.map(([b]) => `${b}: out err/tol · weights err · lse err/tol`).join(' | ')} |`);
console.log(`|---|${BUILDS.map(() => '---').join('|')}|`);
for (const [family, row] of families) {
  const first = row.values().next().value;
  console.log(
    `| ${family} (${first.cases}) | ${BUILDS.map(([b]) => {
      const r = row.get(b);
      return `${cell(r.out)} · ${cell(r.weights)} · ${cell(r.lse)}`;
    }).join(' | ')} |`,
  );
}
