// The boundary between web/src and the wasm module, seen from the module itself (dist/mha.js with the simd
// and baseline .wasm): the status messages have one source, the C++ core, and the attention call struct
// is what src/bindings.cpp says it is. A call that sets an option the core does not implement is refused
// with kUnsupportedOption, never run without it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import createMhaModule from '../../dist/mha.js';
import { createMHA } from '../../dist/index.js';
import { bitsEqual, mulberry32, randomNormal, repoRoot } from './helpers.mjs';

/** The mha::Status enumerators of src/mha/core/shape.hpp: [name, number]. */
function cppStatuses() {
  const header = fs.readFileSync(path.join(repoRoot, 'src/mha/core/shape.hpp'), 'utf8');
  const body = /enum class Status : int32_t \{([^}]*)\}/.exec(header);
  assert.ok(body, 'src/mha/core/shape.hpp has no enum class Status');
  return [...body[1].matchAll(/^\s*(k\w+) = (\d+),/gm)].map((m) => [m[1], Number(m[2])]);
}

/** Every .ts file under web/src, with its text. */
function tsSources(dir = path.join(repoRoot, 'web/src')) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return tsSources(file);
    return entry.name.endsWith('.ts') ? [[file, fs.readFileSync(file, 'utf8')]] : [];
  });
}

const builds = {};
for (const file of ['mha.wasm', 'mha-baseline.wasm']) {
  builds[file] = await createMhaModule({ wasmBinary: fs.readFileSync(path.join(repoRoot, 'dist', file)) });
}
const K_UNSUPPORTED_OPTION = Object.fromEntries(cppStatuses()).kUnsupportedOption;

test('every status of src/mha/core/shape.hpp has a message from the module; numbers that are none have an empty one', () => {
  const statuses = cppStatuses();
  assert.ok(statuses.length >= 8, `found only ${statuses.length} statuses`);
  assert.deepEqual(
    statuses.map(([, n]) => n),
    statuses.map((_, i) => i),
    'the status numbers are 0, 1, 2, ...',
  );
  for (const [file, wasm] of Object.entries(builds)) {
    const messages = statuses.map(([name, n]) => {
      const message = wasm.statusMessage(n);
      assert.ok(typeof message === 'string' && message.length > 0, `${file}: ${name} (${n}) has no message`);
      return message;
    });
    assert.equal(
      new Set(messages).size,
      messages.length,
      `${file}: two statuses share a message: ${messages.join(' | ')}`,
    );
    assert.equal(wasm.statusMessage(statuses.length), '');
    assert.equal(wasm.statusMessage(-1), '');
  }
});

test('web/src holds no copy of a status message (they come from the module on the error path)', () => {
  const wasm = builds['mha.wasm'];
  const messages = cppStatuses()
    .filter(([name]) => name !== 'kOk')
    .map(([, n]) => wasm.statusMessage(n));
  const sources = [
    ...tsSources(),
    [path.join(repoRoot, 'dist/index.js'), fs.readFileSync(path.join(repoRoot, 'dist/index.js'), 'utf8')],
  ];
  assert.ok(sources.length > 10, 'the TypeScript sources were not found');
  for (const [file, text] of sources) {
    for (const message of messages)
      assert.ok(!text.includes(message), `${path.relative(repoRoot, file)} copies the message "${message}"`);
    assert.ok(
      !/STATUS_MESSAGES|kUnsupportedOption|kOutOfMemory/.test(text),
      `${path.relative(repoRoot, file)} names a status`,
    );
  }
});

test('attentionCallLayout: 4-byte fields at distinct offsets that cover the whole struct', () => {
  for (const [file, wasm] of Object.entries(builds)) {
    const { size, ...fields } = wasm.attentionCallLayout();
    const offsets = Object.values(fields).sort((a, b) => a - b);
    assert.deepEqual(
      offsets,
      offsets.map((_, i) => 4 * i),
      `${file}: ${JSON.stringify(fields)}`,
    );
    assert.equal(size, 4 * offsets.length);
    for (const name of [
      'q',
      'k',
      'v',
      'out',
      'mask',
      'batch',
      'seq_len',
      'kv_seq_len',
      'd_model',
      'num_heads',
      'causal',
      'scale',
    ]) {
      assert.ok(name in fields, `${file}: no field ${name}`);
    }
  }
});

// One attention call written field by field: B = 2, S = T = 5, H = 4, Dh = 3 (the spec example's size).
const [B, S, T, H, Dh] = [2, 5, 5, 4, 3];
const D = H * Dh;
const random = mulberry32(1312);
const [q, k, v] = [0, 1, 2].map(() => randomNormal(B * S * D, random));

/** v1 field values of the call, and the v2 and v3 fields at their "none" values (see AttentionCallAbi). */
function v1Call() {
  return {
    batch: B,
    seq_len: S,
    kv_seq_len: T,
    d_model: D,
    num_heads: H,
    num_kv_heads: H,
    query_offset: 0,
    causal: 0,
    window_left: -1,
    window_right: -1,
    bias_batch: 1,
    bias_heads: 1,
    empty_rows: 0,
    scale: Math.fround(1 / Math.sqrt(Dh)),
    softcap: 0,
    mask: 0,
    bias: 0,
    kv_lengths: 0,
    alibi_slopes: 0,
    lse: 0,
    v_head_dim: 0,
    sinks: 0,
    rope_cos: 0,
    rope_sin: 0,
    rope_positions: 0,
    rope_rotary_dim: 0,
    rope_interleaved: 0,
    rope_first_position: 0,
    stage: 3,
  };
}

/**
 * Runs _mha_attention on `fields` (over v1Call), with q, k, v staged; typed arrays given as fields are
 * staged too and replaced by their address. Returns the status, the output (B,S,D) and the lse buffer
 * (B,H,S), which starts filled with 12345.
 */
function runCall(wasm, fields) {
  const layout = wasm.attentionCallLayout();
  const call = { ...v1Call(), ...fields };
  const blocks = [];
  const stage = (array) => {
    const at = wasm._malloc(Math.max(16, array.byteLength));
    blocks.push(at);
    new Uint8Array(wasm.HEAPU8.buffer, at, array.byteLength).set(
      new Uint8Array(array.buffer, array.byteOffset, array.byteLength),
    );
    return at;
  };
  const [qAt, kAt, vAt, outAt, lseAt] = [
    q,
    k,
    v,
    new Float32Array(B * S * D),
    new Float32Array(B * H * S).fill(12345),
  ].map(stage);
  Object.assign(call, { q: qAt, k: kAt, v: vAt, out: outAt, lse: call.lse === 0 ? 0 : lseAt });
  for (const [name, value] of Object.entries(call)) if (ArrayBuffer.isView(value)) call[name] = stage(value);
  const callAt = wasm._malloc(layout.size);
  blocks.push(callAt);
  for (const name of Object.keys(layout)) {
    if (name !== 'size') assert.ok(name in call, `the test's v1 call has no value for the module's field ${name}`);
  }
  for (const [name, value] of Object.entries(call)) {
    assert.ok(name in layout, `the module's struct has no field ${name}`);
    if (name === 'scale' || name === 'softcap') wasm.HEAPF32[(callAt + layout[name]) >>> 2] = value;
    else wasm.HEAP32[(callAt + layout[name]) >>> 2] = value;
  }
  const status = wasm._mha_attention(callAt);
  const out = new Float32Array(wasm.HEAPF32.buffer, outAt, B * S * D).slice();
  const lse = new Float32Array(wasm.HEAPF32.buffer, lseAt, B * H * S).slice();
  for (const at of blocks) wasm._free(at);
  return { status, out, lse };
}

test('a v1 call written field by field gives the bits of the public API', async () => {
  const mha = await createMHA({ warmup: false });
  const shape = { batch: B, seqLen: S, dModel: D, numHeads: H };
  for (const causal of [false, true]) {
    const { status, out } = runCall(builds['mha.wasm'], { causal: causal ? 1 : 0 });
    assert.equal(status, 0);
    assert.ok(bitsEqual(out, mha.multiHeadAttention(q, k, v, { ...shape, causal })), `causal ${causal}`);
  }
});

// Each v2 field with a value that changes the result of this call (or, for lse, writes the lse buffer).
const mask = new Uint8Array(B * S * T).fill(1).fill(0, 0, T); // row 0 of batch item 0 sees no key: empty
const V2_FIELDS = {
  num_kv_heads: { num_kv_heads: 2 },
  query_offset: { query_offset: 2, causal: 1, kv_seq_len: T },
  window: { window_left: 0, window_right: 0 },
  kv_lengths: { kv_lengths: new Int32Array([2, 3]) },
  softcap: { softcap: 0.25 },
  alibi_slopes: { alibi_slopes: new Float32Array([1, 0.5, 0.25, 2]) },
  bias: { bias: randomNormal(S * T, random), bias_batch: 1, bias_heads: 1 },
  empty_rows: { empty_rows: 1, mask: new Uint8Array(mask) },
  lse: { lse: 1 },
  // v3 (docs/spec.md 4.1, 4.4, 4.5): the kernels may refuse them with kNotInKernels until they compute them.
  v_head_dim: { v_head_dim: 2 },
  sinks: { sinks: new Float32Array([1, -1, 2, 0]) },
  rope: {
    rope_cos: new Float32Array(T).fill(0.5),
    rope_sin: new Float32Array(T).fill(0.75),
    rope_positions: T,
    rope_rotary_dim: 2,
  },
};

for (const [file, wasm] of Object.entries(builds)) {
  test(`${file}: a call that sets a v2 field is refused with kUnsupportedOption or runs with it, never without it`, () => {
    const plain = runCall(wasm, {});
    const masked = runCall(wasm, { mask: new Uint8Array(mask) });
    for (const [name, fields] of Object.entries(V2_FIELDS)) {
      const r = runCall(wasm, fields);
      if (r.status === K_UNSUPPORTED_OPTION) continue;
      assert.equal(r.status, 0, `${name}: status ${r.status}: ${wasm.statusMessage(r.status)}`);
      if (name === 'lse') assert.ok(!r.lse.every((x) => x === 12345), 'lse: the call ran but wrote no lse');
      else
        assert.ok(
          !bitsEqual(r.out, name === 'empty_rows' ? masked.out : plain.out),
          `${name}: the call ran as if it were not set`,
        );
    }
    // stage belongs to attention_weights: any other value than softmax (3) refuses mha_attention.
    assert.equal(runCall(wasm, { stage: 0 }).status, K_UNSUPPORTED_OPTION, 'stage 0 on mha_attention');
  });
}

test("web/src/status.ts's HEAP_STATUSES are shape.hpp's kOutOfMemory and kCacheTooLarge", () => {
  const source = fs.readFileSync(path.join(repoRoot, 'web/src/status.ts'), 'utf8');
  const listed = /HEAP_STATUSES: readonly number\[\] = \[([^\]]*)\]/.exec(source);
  assert.ok(listed, 'web/src/status.ts has no HEAP_STATUSES list');
  const statuses = Object.fromEntries(cppStatuses());
  assert.deepEqual(listed[1].split(',').map(Number), [statuses.kOutOfMemory, statuses.kCacheTooLarge]);
});
