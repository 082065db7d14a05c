// The warm-up createMHA runs before it resolves: V8 first runs wasm through a baseline compiler, and a
// long first call would otherwise run there from start to end, several times slower than later calls.
import type { MHA } from './types.js';

/** Compiled modules whose warm-up saw the optimizing tier take over. */
export const warmedModules = new WeakSet<WebAssembly.Module>();

/**
 * Runs a small attention (1, 128, 128, 128, 2 heads: the same micro-kernels as any head size) until two
 * calls in a row take under 40 % of the baseline, i.e. the optimizing tier has replaced the baseline
 * code, or 250 ms have passed. The baseline is the fastest of calls 1-4: call 0 includes lazy
 * compilation, and single calls can be slowed by a GC or a compile on this thread, which once made a
 * noisy baseline accept baseline-tier code (Chromium, a module from the code cache: the next calls ran
 * 6-8x slower than warm). Yields to the event loop now and then so the page stays responsive. Returns
 * whether the tier-up was seen (false after 250 ms without it).
 */
export async function warmUp(mha: MHA): Promise<boolean> {
  const shape = { batch: 1, seqLen: 128, dModel: 128, numHeads: 2 };
  const x = Float32Array.from({ length: 128 * 128 }, (_, i) => Math.sin(i * 0.37));
  const out = new Float32Array(x.length);
  const start = performance.now();
  let baseline = Infinity;
  let fastInARow = 0;
  for (let call = 0; performance.now() - start < 250; call++) {
    const t = performance.now();
    mha.multiHeadAttention(x, x, x, { ...shape, out });
    const elapsed = performance.now() - t;
    if (call >= 1 && call <= 4) baseline = Math.min(baseline, elapsed);
    else if (call > 4) {
      fastInARow = elapsed < 0.4 * baseline ? fastInARow + 1 : 0;
      if (fastInARow === 2) return true;
    }
    if (call % 8 === 7) await new Promise((resolve) => setTimeout(resolve, 0));
  }
  return false;
}
