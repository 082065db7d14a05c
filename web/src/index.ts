/**
 * mha-wasm: exact, fast multi-head attention for the web.
 *
 * A thin layer over the WebAssembly module built from `src/` (C++17 + xsimd, SIMD128). It validates
 * arguments, copies inputs into the wasm heap, calls the kernel and copies the result out; tensors that
 * live on the heap ({@link MHA.allocate}) are passed by address instead, with no copy. Five builds
 * of the same core ship (`relaxed-simd`, `relaxed-simd-threads`, `simd`, `simd-threads`, `baseline`; see
 * loader/builds.ts); {@link createMHA} picks one per instance. Shapes are
 * row-major, outermost first, with these letters: B batch, S query length, T key/value length,
 * H heads, Dh = D / H head size, D model size.
 *
 * This module only re-exports the public API; web/bundle.mjs builds it and the modules it imports into
 * one dist/index.js and one dist/index.d.ts.
 *
 * @packageDocumentation
 */
export type {
  CreateOptions,
  MHAInfo,
  BuildName,
  HeadShape,
  AttentionBaseOptions,
  AttentionWeightsOptions,
  AttentionOptions,
  MHA,
} from './types.js';
export type { MergeAttentionOptions } from './merge-attention.js';
export type {
  AttentionState,
  KVCache,
  KVCacheArithmetic,
  KVCacheAttendOptions,
  KVCacheContents,
  KVCacheDType,
  KVCacheOptions,
  KVCacheReadOptions,
  LoadKVCacheOptions,
} from './kv-cache-types.js';
export type {
  Float16ArrayLike,
  Float16Tensor,
  HeapTensor,
  RopeOptions,
  TensorDType,
  TensorIn,
  TensorOut,
} from './tensor-types.js';
export type { RopeTables, RopeTablesOptions } from './rope.js';
export { createMHA, version } from './create.js';
export { integerArithmeticDTypes, kvCacheDTypes } from './cache-dtype.js';
export { ropeTables } from './rope.js';
