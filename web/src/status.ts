// The mha::Status codes the wasm exports return. Their messages have one source, the C++ core
// (mha::status_message in src/mha/core/shape.cpp), read from the module on the error path: no table here.
import type { MhaWasmModule } from './mha.js';

/** The statuses that mean the heap could not hold something (shape.hpp: out of memory, cache too large). */
export const HEAP_STATUSES: readonly number[] = [6, 17];

/**
 * Throws a RangeError naming `fn` unless `status` is 0 (kOk). JS validation runs first, so a nonzero status
 * only surfaces when the two layers disagree, or for an option this build's core does not implement; the
 * message says what the core refused.
 */
export function checkStatus(wasm: MhaWasmModule, fn: string, status: number): void {
  if (status === 0) return;
  const message = wasm.statusMessage(status) || `unknown status ${status}`;
  throw new RangeError(`${fn}: the wasm core rejected the call: ${message}`);
}
