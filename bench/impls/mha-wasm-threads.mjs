// mha-wasm with its threaded build (createMHA({ threads: 2 })): the simd-threads module, a pool of Node
// worker threads on shared memory. The row is comparable with 'mha-wasm' (1 thread) of the same run.
import { create as createMhaWasm } from './mha-wasm.mjs';

export function create(shape, options = {}) {
  return createMhaWasm(shape, { threads: 2, ...options });
}
