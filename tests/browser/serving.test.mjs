// The serving features of docs/spec.md Part 5 in the page, on every engine of scripts/lib/engines.mjs and
// every build it runs (createMHA's choice, plain SIMD128, the baseline): 3 samples over a shared prefix
// against a cache holding copies of it, a ring cache past its capacity against a plain cache with the same
// window, reorder, and mergeAttention of the prefix's and the samples' own states. The page reports the
// largest differences; Node checks them (the same tolerances as tests/js).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestServer } from '../../scripts/lib/engines.mjs';
import { forEachEngine } from './suites.mjs';

let server;

before(async () => {
  server = await startTestServer();
});

after(async () => {
  await server?.close();
});

forEachEngine((engine) => {
  test('prefix, ring, reorder and mergeAttention: as the caches they stand for, in every build', async () => {
    const page = await engine.open(new URL('tests/browser/fixtures/blank.html', server.url).href);
    const builds = engine.caps.relaxedSimd ? [{}, { simd: 'fixed' }, { simd: false }] : [{}, { simd: false }];
    const r = await page.evaluate(async (optionsList) => {
      const { createMHA } = await import('/dist/index.js');
      const { mulberry32 } = await import('/scripts/lib/prng.mjs');
      const random = mulberry32(5);
      const rand = (n) => Float32Array.from({ length: n }, () => random() * 2 - 1);
      /** The largest |a - b| / (1e-1 + |b|) (infinities must match: else Infinity). */
      const worst = (a, b) => {
        let w = 0;
        for (let i = 0; i < a.length; i++)
          if (!Object.is(a[i], b[i])) w = Math.max(w, Math.abs(a[i] - b[i]) / (0.1 + Math.abs(b[i])));
        return w;
      };
      const [B, H, HKV, DH, LP, C, W] = [3, 4, 2, 16, 37, 24, 16];
      const repeat = (x) => {
        const out = new Float32Array(x.length * B);
        for (let b = 0; b < B; b++) out.set(x, b * x.length);
        return out;
      };
      const results = [];
      for (const options of optionsList) {
        const mha = await createMHA(options);
        const config = { numKvHeads: HKV, headDim: DH };
        // A prefix and 3 samples, against 3 copies of the prefix.
        const prefix = mha.createKVCache({ ...config, batch: 1, capacity: 64 });
        const samples = mha.createKVCache({ ...config, batch: B, capacity: 64 });
        const copies = mha.createKVCache({ ...config, batch: B, capacity: 128 });
        const [q, k, v] = [rand(LP * H * DH), rand(LP * HKV * DH), rand(LP * HKV * DH)];
        prefix.attend(q, k, v, { numHeads: H });
        copies.attend(repeat(q), repeat(k), repeat(v), { numHeads: H });
        let prefixWorst = 0;
        let merged = 0;
        for (let step = 0; step < 6; step++) {
          const [qs, ks, vs] = [rand(B * H * DH), rand(B * HKV * DH), rand(B * HKV * DH)];
          const got = samples.attend(qs, ks, vs, { numHeads: H, prefix, lse: true });
          const want = copies.attend(qs, ks, vs, { numHeads: H, lse: true });
          prefixWorst = Math.max(prefixWorst, worst(got.out, want.out), worst(got.lse, want.lse));
          if (step === 3) (samples.reorder([2, 0, 0]), copies.reorder([2, 0, 0]));
          if (step === 5) {
            // The two parts' states merged = the call (the prefix's through the stateless call).
            const lse = new Float32Array(B * H);
            const kp = repeat(prefix.read().k);
            const vp = repeat(prefix.read().v);
            const shape = { batch: B, seqLen: 1, kvSeqLen: LP, dModel: H * DH, numHeads: H, numKvHeads: HKV };
            const first = { out: mha.multiHeadAttention(qs, kp, vp, { ...shape, lse }), lse };
            const own = samples.read();
            const ownLse = new Float32Array(B * H);
            const ownOut = mha.multiHeadAttention(qs, own.k, own.v, {
              ...shape,
              kvSeqLen: samples.length,
              lse: ownLse,
            });
            const m = mha.mergeAttention([first, { out: ownOut, lse: ownLse }], { batch: B, seqLen: 1, numHeads: H });
            merged = Math.max(worst(m.out, got.out), worst(m.lse, got.lse));
          }
        }
        // A ring of C tokens fed 8 C, against a plain cache with the same window.
        const ring = mha.createKVCache({ ...config, batch: 1, capacity: C, ring: true });
        const plain = mha.createKVCache({ ...config, batch: 1, capacity: 8 * C + 8 });
        let ringWorst = 0;
        while (ring.length < 8 * C) {
          const n = 1 + Math.floor(random() * (C - W - 1));
          const [qs, ks, vs] = [rand(n * H * DH), rand(n * HKV * DH), rand(n * HKV * DH)];
          const o = { numHeads: H, window: [W, 0], lse: true };
          const got = ring.attend(qs, ks, vs, o);
          const want = plain.attend(qs, ks, vs, o);
          ringWorst = Math.max(ringWorst, worst(got.out, want.out), worst(got.lse, want.lse));
        }
        results.push({
          build: mha.info.build,
          prefixWorst,
          merged,
          ringWorst,
          stored: ring.stored[0],
          length: ring.length,
          saved: mha.loadKVCache(ring.save()).stored[0],
        });
        mha.dispose();
      }
      return results;
    }, builds);
    assert.equal(r.length, builds.length);
    for (const x of r) {
      assert.ok(x.prefixWorst < 1e-4, `${x.build}: prefix against copies ${x.prefixWorst}`);
      assert.ok(x.merged < 1e-4, `${x.build}: merged states against the prefix call ${x.merged}`);
      assert.ok(x.ringWorst < 1e-4, `${x.build}: ring against plain ${x.ringWorst}`);
      assert.ok(x.length >= 8 * 24 && x.stored === 24 && x.saved === 24, JSON.stringify(x));
    }
  });
});
