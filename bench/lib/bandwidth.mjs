// Memory-bandwidth ceiling: the physical limit of a decode step, as the mul+add ceiling is prefill's.
// A hand-assembled WASM SIMD module streams over a buffer far larger than the last-level cache with
// v128.load into 8 independent i32x4.add accumulators (integer adds: one cycle of latency, so the loop
// is bound by the loads, not by the adds), 128 bytes per iteration. The bytes are emitted here (no build
// step). measureBandwidth runs on the calling thread; bench/lib/bandwidth-threads.mjs (Node) runs one
// stream per worker over its own slice of one shared memory.
import { uleb, str, section, vec } from './wasm-bytes.mjs';

const I32 = 0x7f,
  V128 = 0x7b;
const LOCAL_GET = 0x20,
  LOCAL_SET = 0x21,
  LOCAL_TEE = 0x22;
const I32_CONST = 0x41,
  I32_ADD = 0x6a,
  I32_LT_U = 0x49;
const LOOP = 0x03,
  BR_IF = 0x0d,
  END = 0x0b,
  BLOCKTYPE_EMPTY = 0x40;
const SIMD = 0xfd;
const V128_LOAD = [SIMD, ...uleb(0)];
const I32X4_ADD = [SIMD, ...uleb(174)];
const I32X4_EXTRACT_LANE = [SIMD, ...uleb(27)];

const ACCUMULATORS = 8;
export const BYTES_PER_ITERATION = ACCUMULATORS * 16;
const PAGE = 65536;
/**
 * Default buffer: 256 MiB, 8x a 32 MiB L3, so every pass comes from DRAM there (the report states its ratio
 * to the last-level cache of the machine at hand).
 */
export const DEFAULT_BUFFER_BYTES = 256 * 2 ** 20;

/**
 * Bytes of the module: imports memory env.mem (`pages` pages, shared when asked: a shared memory is
 * what worker threads can read together) and exports `run(begin: i32, end: i32) -> i32`, one pass over
 * bytes [begin, end) (end - begin a positive multiple of 128), returning a lane sum that keeps the loads live.
 */
export function bandwidthModuleBytes({ pages, shared = false }) {
  // Locals: 0 = begin (the moving pointer), 1 = end, 2..9 = accumulators.
  const body = [LOOP, BLOCKTYPE_EMPTY];
  for (let a = 0; a < ACCUMULATORS; a++) {
    body.push(LOCAL_GET, 2 + a, LOCAL_GET, 0, ...V128_LOAD, 4, ...uleb(16 * a), ...I32X4_ADD, LOCAL_SET, 2 + a);
  }
  body.push(
    LOCAL_GET,
    0,
    I32_CONST,
    ...uleb(BYTES_PER_ITERATION),
    I32_ADD,
    LOCAL_TEE,
    0,
    LOCAL_GET,
    1,
    I32_LT_U,
    BR_IF,
    0,
    END,
  );
  body.push(LOCAL_GET, 2);
  for (let a = 1; a < ACCUMULATORS; a++) body.push(LOCAL_GET, 2 + a, ...I32X4_ADD);
  body.push(...I32X4_EXTRACT_LANE, 0, END);
  const func = [...vec([[...uleb(ACCUMULATORS), V128]]), ...body];
  const limits = shared ? [0x03, ...uleb(pages), ...uleb(pages)] : [0x01, ...uleb(pages), ...uleb(pages)];
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, vec([[0x60, ...vec([[I32], [I32]]), ...vec([[I32]])]])), // type: (i32, i32) -> i32
    ...section(2, vec([[...str('env'), ...str('mem'), 0x02, ...limits]])), // import memory
    ...section(3, vec([uleb(0)])),
    ...section(7, vec([[...str('run'), 0x00, 0x00]])),
    ...section(10, vec([[...uleb(func.length), ...func]])),
  ]);
}

/** A memory of `bytes` (rounded up to pages), every page written once so no pass pays page faults. */
export function touchedMemory(bytes, { shared = false } = {}) {
  const pages = Math.ceil(bytes / PAGE);
  const memory = new WebAssembly.Memory({ initial: pages, maximum: pages, ...(shared ? { shared: true } : {}) });
  new Int32Array(memory.buffer).fill(1);
  return { memory, pages };
}

/** One streaming reader over `memory` bytes [begin, end): returns a function that runs one pass. */
export function bandwidthReader(memory, pages, { shared = false } = {}) {
  const module = new WebAssembly.Module(bandwidthModuleBytes({ pages, shared }));
  const { run } = new WebAssembly.Instance(module, { env: { mem: memory } }).exports;
  return run;
}

/**
 * Single-thread streaming-read bandwidth: the best and median of `trials` passes over a buffer of
 * `bytes`, in GB/s (1e9 bytes per second). Synchronous.
 */
export function measureBandwidth({ bytes = DEFAULT_BUFFER_BYTES, trials = 9 } = {}) {
  const { memory, pages } = touchedMemory(bytes);
  const run = bandwidthReader(memory, pages);
  const end = pages * PAGE;
  let sink = run(0, end); // warm-up pass (and tier-up)
  const samples = [];
  for (let t = 0; t < trials; t++) {
    const t0 = performance.now();
    sink += run(0, end);
    samples.push(end / ((performance.now() - t0) * 1e6));
  }
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    gbps: sorted[sorted.length - 1],
    medianGbps: sorted[sorted.length >> 1],
    samples,
    bufferBytes: end,
    threads: 1,
    checksum: sink,
  };
}
