// The call ABI: the two call structs of src/call_abi.hpp, written here into the call slot of the staging
// arena: AttentionCallAbi, read by the direct exports _mha_attention / _mha_attention_weights, and
// CacheAttendCallAbi, read by _mha_kv_cache_attend. Both carry the option fields of one list
// (MHA_OPTION_FIELDS), written by one function, writeOptionFields. The header's field lists also give
// abi-fields.generated.ts (scripts/gen-abi.mjs); the field offsets come from the
// module (attentionCallLayout, kvCacheAttendCallLayout, built with offsetof): fields are written by name,
// and no offset is copied by hand. Writing is plain stores into the heap views, so a call costs no
// allocation and no Embind conversion.
import { attentionCallSlots, cacheAttendCallSlots } from './abi-fields.generated.js';
import type { OptionField } from './abi-fields.generated.js';
import type { AttentionCall } from './attention-options.js';
import type { Rope } from './rope-options.js';
import type { MhaWasmModule } from './mha.js';

export type CallLayout = Readonly<ReturnType<typeof attentionCallSlots>>;
export type CacheCallLayout = Readonly<ReturnType<typeof cacheAttendCallSlots>>;

/**
 * The slots of a call struct from the module's `offsets` (`what` names the struct), or what does not
 * match when the module's fields are not exactly the ones this script writes, each 4-byte aligned,
 * distinct and within the struct (then no field could be left unwritten, or written over another).
 */
function readLayout<L extends { readonly bytes: number }>(
  what: string,
  offsets: Record<string, number>,
  slotsOf: (offsets: Readonly<Record<string, number>>) => L,
): L | string {
  const layout = slotsOf(offsets);
  const written = Object.keys(layout).filter((name) => name !== 'bytes');
  const names = Object.keys(offsets).filter((name) => name !== 'size');
  const unknown = names.filter((name) => !written.includes(name));
  const missing = written.filter((name) => !names.includes(name));
  if (unknown.length > 0 || missing.length > 0) {
    return (
      `its ${what} has the fields ${names.join(', ')}` +
      `${missing.length > 0 ? `, without ${missing.join(', ')}` : ''}` +
      `${unknown.length > 0 ? `, with ${unknown.join(', ')}` : ''}`
    );
  }
  if (layout.bytes !== written.length * 4)
    return `its ${what} is ${layout.bytes} bytes, expected ${written.length * 4}`;
  const slots = new Set<number>();
  for (const name of written) {
    const slot = (layout as unknown as Record<string, number>)[name]!;
    if (!Number.isInteger(slot) || slot < 0 || slot >= written.length || slots.has(slot)) {
      return `its ${what} has field ${name} at byte offset ${offsets[name]}`;
    }
    slots.add(slot);
  }
  return layout;
}

/** The module's layout of AttentionCallAbi, or what does not match (readLayout). */
export function readCallLayout(wasm: MhaWasmModule): CallLayout | string {
  return readLayout('attention call struct', wasm.attentionCallLayout(), attentionCallSlots);
}

/** The module's layout of CacheAttendCallAbi, or what does not match (readLayout). */
export function readCacheCallLayout(wasm: MhaWasmModule): CacheCallLayout | string {
  return readLayout('KV cache call struct', wasm.kvCacheAttendCallLayout(), cacheAttendCallSlots);
}

/** The slots of the option fields (MHA_OPTION_FIELDS), which both call structs carry. */
export type OptionSlots = Readonly<Record<OptionField, number>>;

/** The checked options an option field is written from: the stateless call's ModelOptions, or cache.attend's. */
export interface OptionValues {
  /** -1 = unbounded. */
  windowLeft: number;
  windowRight: number;
  /** 0 = none. */
  softcap: number;
  /** 0 = 'nan', 1 = 'zero'. */
  emptyRows: 0 | 1;
  rope: Rope | undefined;
}

/**
 * Writes the option fields of either call struct (the one writer of MHA_OPTION_FIELDS). `alibiSlopes`,
 * `sinks`, `ropeCos` and `ropeSin`: the heap addresses of the staged slopes, sinks and rope tables (0 =
 * none); the tables hold the positions [ropeFirst, ropeRows) (0 and 0 without rope).
 */
export function writeOptionFields(
  wasm: MhaWasmModule,
  L: OptionSlots,
  at: number,
  causal: boolean,
  scale: number,
  o: OptionValues,
  alibiSlopes: number,
  sinks: number,
  ropeCos: number,
  ropeSin: number,
  ropeRows: number,
  ropeFirst: number,
): void {
  const i32 = wasm.HEAP32;
  const f32 = wasm.HEAPF32;
  const base = at >>> 2;
  const rope = o.rope;
  i32[base + L.causal] = causal ? 1 : 0;
  i32[base + L.window_left] = o.windowLeft;
  i32[base + L.window_right] = o.windowRight;
  i32[base + L.empty_rows] = o.emptyRows;
  f32[base + L.scale] = scale;
  f32[base + L.softcap] = o.softcap;
  i32[base + L.alibi_slopes] = alibiSlopes;
  i32[base + L.sinks] = sinks;
  i32[base + L.rope_cos] = ropeCos;
  i32[base + L.rope_sin] = ropeSin;
  i32[base + L.rope_positions] = rope ? ropeRows : 0;
  i32[base + L.rope_rotary_dim] = rope ? rope.rotaryDim : 0;
  i32[base + L.rope_interleaved] = rope?.interleaved ? 1 : 0;
  i32[base + L.rope_first_position] = rope ? ropeFirst : 0;
}

/**
 * Writes what every kernel call of one stateless API call shares: its dims, the fields only that struct
 * has (query_offset, bias_heads, stage) and the option fields (writeOptionFields; the rope tables hold
 * the call's rows [0, model.ropeRows)). `stage`: attentionWeights' stage (3 = softmax, what
 * multiHeadAttention writes).
 */
export function writeCallOptions(
  wasm: MhaWasmModule,
  L: CallLayout,
  at: number,
  call: AttentionCall<unknown, unknown>,
  alibiSlopes: number,
  sinks = 0,
  ropeCos = 0,
  ropeSin = 0,
  stage = 3,
): void {
  const i32 = wasm.HEAP32;
  const base = at >>> 2;
  const d = call.d;
  const m = call.model;
  i32[base + L.seq_len] = d.seqLen;
  i32[base + L.kv_seq_len] = d.kvSeqLen;
  i32[base + L.d_model] = d.dModel;
  i32[base + L.num_heads] = d.numHeads;
  i32[base + L.num_kv_heads] = d.numKvHeads;
  i32[base + L.v_head_dim] = d.vHeadDim;
  i32[base + L.query_offset] = m.queryOffset;
  i32[base + L.bias_heads] = m.biasHeads;
  i32[base + L.stage] = stage;
  writeOptionFields(wasm, L, at, call.causal, call.scale, m, alibiSlopes, sinks, ropeCos, ropeSin, m.ropeRows, 0);
}

/**
 * Writes the operands of one kernel call over `batch` items: heap addresses (0 = none) of q, k, v, out,
 * the mask, the bias, the key lengths and the lse output, and the call's bias_batch (`batch` for a bias
 * with a batch dim, which the call then reads as its own slice; else 1, also without a bias).
 */
export function writeCallOperands(
  wasm: MhaWasmModule,
  L: CallLayout,
  at: number,
  q: number,
  k: number,
  v: number,
  out: number,
  mask: number,
  bias: number,
  biasBatch: number,
  kvLengths: number,
  lse: number,
  batch: number,
): void {
  const i32 = wasm.HEAP32;
  const base = at >>> 2;
  i32[base + L.q] = q;
  i32[base + L.k] = k;
  i32[base + L.v] = v;
  i32[base + L.out] = out;
  i32[base + L.mask] = mask;
  i32[base + L.bias] = bias;
  i32[base + L.bias_batch] = biasBatch;
  i32[base + L.kv_lengths] = kvLengths;
  i32[base + L.lse] = lse;
  i32[base + L.batch] = batch;
}

/** The operands of a KV cache attend call: heap addresses (0 = none for lse and newTokenCounts) and dims. */
export interface CacheOperands {
  /** The cache's id. */
  cache: number;
  q: number;
  k: number;
  v: number;
  out: number;
  /** (B, H, n) float32 output, or 0. */
  lse: number;
  /** n, the rows of q, k, v and out per sequence. */
  newTokens: number;
  numHeads: number;
  /** int32 (B) real rows per sequence, or 0 (n for each). */
  newTokenCounts: number;
  /** The id of a batch-1 cache whose tokens come first (a shared prefix), or 0. */
  prefix: number;
}

/** Writes the operands of a KV cache attend call into its struct at `at`. */
export function writeCacheOperands(wasm: MhaWasmModule, L: CacheCallLayout, at: number, o: CacheOperands): void {
  const i32 = wasm.HEAP32;
  const base = at >>> 2;
  i32[base + L.cache] = o.cache | 0; // a uint32 id in an int32 view
  i32[base + L.q] = o.q;
  i32[base + L.k] = o.k;
  i32[base + L.v] = o.v;
  i32[base + L.out] = o.out;
  i32[base + L.lse] = o.lse;
  i32[base + L.new_tokens] = o.newTokens;
  i32[base + L.num_heads] = o.numHeads;
  i32[base + L.new_token_counts] = o.newTokenCounts;
  i32[base + L.prefix] = o.prefix | 0; // a uint32 id in an int32 view
}
