// Browser side of `node bench/run.mjs --browser`: the same measurement code as the Node children.
import { IMPLS } from '../impls/index.mjs';
import { shapeByName } from '../lib/shapes.mjs';
import { measure } from '../lib/measure.mjs';
import { measureCeiling } from '../lib/ceiling.mjs';

window.__benchRun = async function benchRun(config) {
  try {
    if (config.impl === 'ceiling') return { impl: 'ceiling', status: 'ok', ...measureCeiling() };
    const entry = IMPLS[config.impl];
    if (!entry) throw new Error(`unknown implementation "${config.impl}"`);
    const result = await measure({
      impl: config.impl,
      // loadOptions: what the runner prepared in Node (the ONNX graph of the ORT rows)
      load: (shape, options) => entry.load(shape, { ...options, ...config.loadOptions }),
      shape: shapeByName(config.shape),
      seed: config.seed,
      budgetMs: config.budgetMs,
      minReps: config.minReps,
      onPhase: (phase) => {
        window.__benchPhase = phase;
      },
    });
    result.crossOriginIsolated = globalThis.crossOriginIsolated === true;
    return result;
  } catch (error) {
    return {
      impl: config.impl,
      shape: config.shape,
      status: 'error',
      phase: window.__benchPhase,
      error: String(error?.stack ?? error)
        .split('\n')
        .slice(0, 4)
        .join(' | '),
    };
  }
};
window.__benchReady = true;
