// The attention call ABI: one AttentionCallAbi struct (src/bindings.cpp) per kernel call, written here into
// a slot of the staging arena and read by the direct exports _mha_attention / _mha_attention_weights. The
// struct's field offsets come from the module (attentionCallLayout, built with offsetof): fields are
// written by name, and no offset is copied by hand. Writing is plain stores into the heap views, so a call
// costs no allocation and no Embind conversion.
import type { AttentionCall } from './attention-options.js';
import type { MhaWasmModule } from './mha.js';

/**
 * The fields this script writes, every one 4 bytes (uint32 addresses, int32 dims and flags, float32
 * scale and softcap). A module whose struct has other fields is of another release.
 */
const CALL_FIELDS = ['q', 'k', 'v', 'out', 'mask', 'bias', 'kv_lengths', 'alibi_slopes', 'lse', 'batch', 'seq_len',
  'kv_seq_len', 'd_model', 'num_heads', 'num_kv_heads', 'query_offset', 'causal', 'window_left', 'window_right',
  'bias_batch', 'bias_heads', 'empty_rows', 'scale', 'softcap'] as const;

type CallField = (typeof CALL_FIELDS)[number];

/** The 4-byte slot (byte offset / 4) of each field, and the struct's size in bytes. */
export type CallLayout = { readonly [F in CallField]: number } & { readonly bytes: number };

/**
 * Reads the module's layout of AttentionCallAbi. Returns what does not match when the module's fields are
 * not exactly CALL_FIELDS, 4-byte aligned, distinct and within the struct (then no field could be left
 * unwritten, or written over another).
 */
export function readCallLayout(wasm: MhaWasmModule): CallLayout | string {
  const raw = wasm.attentionCallLayout();
  const size = raw.size;
  const names = Object.keys(raw).filter((name) => name !== 'size');
  const unknown = names.filter((name) => !(CALL_FIELDS as readonly string[]).includes(name));
  const missing = CALL_FIELDS.filter((name) => !names.includes(name));
  if (unknown.length > 0 || missing.length > 0) {
    return `its attention call struct has the fields ${names.join(', ')}` +
      `${missing.length > 0 ? `, without ${missing.join(', ')}` : ''}${unknown.length > 0 ? `, with ${unknown.join(', ')}` : ''}`;
  }
  if (size !== CALL_FIELDS.length * 4) return `its attention call struct is ${size} bytes, expected ${CALL_FIELDS.length * 4}`;
  const slots = new Set<number>();
  // Filled in CALL_FIELDS order, so every instance's layout object has the same shape (fast property reads).
  const layout: Record<string, number> = {};
  for (const name of CALL_FIELDS) {
    const offset = raw[name]!;
    if (!Number.isInteger(offset) || offset % 4 !== 0 || offset < 0 || offset >= size || slots.has(offset)) {
      return `its attention call struct has field ${name} at byte offset ${offset}`;
    }
    slots.add(offset);
    layout[name] = offset >>> 2;
  }
  layout.bytes = size;
  return Object.freeze(layout) as CallLayout;
}

/**
 * Writes the fields that every kernel call of one API call shares: dims and options. Options this release
 * does not take yet are written as "none" (see the struct's comments).
 */
export function writeCallOptions(wasm: MhaWasmModule, L: CallLayout, at: number, call: AttentionCall<unknown>): void {
  const i32 = wasm.HEAP32;
  const f32 = wasm.HEAPF32;
  const base = at >>> 2;
  const d = call.d;
  i32[base + L.seq_len] = d.seqLen;
  i32[base + L.kv_seq_len] = d.kvSeqLen;
  i32[base + L.d_model] = d.dModel;
  i32[base + L.num_heads] = d.numHeads;
  i32[base + L.num_kv_heads] = d.numHeads;
  i32[base + L.query_offset] = 0;
  i32[base + L.causal] = call.causal ? 1 : 0;
  i32[base + L.window_left] = -1;
  i32[base + L.window_right] = -1;
  i32[base + L.bias_batch] = 0;
  i32[base + L.bias_heads] = 0;
  i32[base + L.empty_rows] = 0;
  f32[base + L.scale] = call.scale;
  f32[base + L.softcap] = 0;
  i32[base + L.bias] = 0;
  i32[base + L.kv_lengths] = 0;
  i32[base + L.alibi_slopes] = 0;
  i32[base + L.lse] = 0;
}

/** Writes the operands of one kernel call, over `batch` items: heap addresses (0 = none). */
export function writeCallOperands(wasm: MhaWasmModule, L: CallLayout, at: number, q: number, k: number, v: number, out: number,
  mask: number, batch: number): void {
  const i32 = wasm.HEAP32;
  const base = at >>> 2;
  i32[base + L.q] = q;
  i32[base + L.k] = k;
  i32[base + L.v] = v;
  i32[base + L.out] = out;
  i32[base + L.mask] = mask;
  i32[base + L.batch] = batch;
}
