/**
 * The wasm heap's addresses and room. A wasm32 heap grows to 4 GiB (docs/spec.md 5.6), and the module's
 * exports return addresses as signed int32s: one past 2 GiB comes back negative. Every address this layer
 * gets from the module is read here, `>>> 0`, and every "does not fit" message is written here.
 */
import type { MhaWasmModule } from './mha.js';

/**
 * `bytes` from malloc: their address (unsigned), or 0 when the heap cannot give them (the module's malloc
 * returns 0 instead of aborting). Sizes at or past the heap's limit are not asked for.
 */
export function mallocBytes(wasm: MhaWasmModule, bytes: number): number {
  return bytes < wasm.maxMemoryBytes() ? wasm._malloc(bytes) >>> 0 : 0;
}

/** The bytes the instance can still have: its limit less what its heap holds now. */
export function heapRoom(wasm: MhaWasmModule): number {
  return Math.max(0, wasm.maxMemoryBytes() - wasm.heapBytesInUse());
}

/** What is left of the heap, for a message: "the instance can still have N bytes (...)". */
export function roomLeft(wasm: MhaWasmModule): string {
  return `the instance can still have ${heapRoom(wasm)} bytes (its heap may grow to ${wasm.maxMemoryBytes()} bytes)`;
}

/** The tail of a RangeError for `bytes` that do not fit: what they need and what is left. */
export function doesNotFit(wasm: MhaWasmModule, bytes: number): string {
  return `needs ${bytes} bytes of wasm memory, more than ${roomLeft(wasm)}`;
}
