// The TypeScript half of the attention call ABI, tested on its own: the instance's two attention exports
// are replaced by a stand-in that reads the AttentionCallAbi struct by field name (attentionCallLayout),
// reads the operands it points at from the heap, runs the float64 JS reference with the options the struct
// carries, and writes out (or the weights) and lse where the struct says. So validation, staging (batch
// groups included), heap tensors and the struct are checked end to end whatever the C++ core implements.
// White-box: the stand-in reaches the module through the instance's private `wasm` field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMHA } from '../../dist/index.js';
import { attention } from '../../scripts/lib/reference.mjs';
import {
  bitsEqual,
  checkLse,
  checkOut,
  checkWeights,
  goldenOptions,
  goldenV2Dir,
  heapCopy,
  loadGoldenCases,
  mulberry32,
  randomNormal,
  readGolden,
  referenceAll,
} from './helpers.mjs';

/**
 * Installs the stand-in core on `mha` and returns the list of the structs it was called with (each as
 * {field: value}, plus `kind`: 'attention' or 'weights').
 */
function installStandIn(mha) {
  const wasm = mha.wasm;
  assert.ok(wasm && typeof wasm._mha_attention === 'function', 'the instance has no wasm module at .wasm');
  const layout = wasm.attentionCallLayout();
  const calls = [];
  const read = (at) => {
    const fields = {};
    for (const [name, offset] of Object.entries(layout)) {
      if (name === 'size') continue;
      fields[name] =
        name === 'scale' || name === 'softcap' ? wasm.HEAPF32[(at + offset) >>> 2] : wasm.HEAP32[(at + offset) >>> 2];
    }
    return fields;
  };
  const floats = (address, length) => wasm.HEAPF32.slice(address >>> 2, (address >>> 2) + length);
  const run = (kind, at) => {
    const c = { kind, ...read(at) };
    calls.push(c);
    const { batch: B, seq_len: S, kv_seq_len: T, d_model: D, num_heads: H, num_kv_heads: Hkv } = c;
    const kvD = (D / H) * Hkv;
    const shape = {
      B,
      S,
      T,
      D,
      H,
      Hkv,
      causal: c.causal === 1,
      scale: c.scale,
      queryOffset: c.query_offset,
      mask: c.mask ? wasm.HEAPU8.slice(c.mask, c.mask + B * S * T) : undefined,
      kvLengths: c.kv_lengths ? wasm.HEAP32.slice(c.kv_lengths >>> 2, (c.kv_lengths >>> 2) + B) : undefined,
      window: [c.window_left === -1 ? Infinity : c.window_left, c.window_right === -1 ? Infinity : c.window_right],
      softcap: c.softcap === 0 ? undefined : c.softcap,
      alibiSlopes: c.alibi_slopes ? floats(c.alibi_slopes, H) : undefined,
      bias: c.bias ? floats(c.bias, c.bias_batch * c.bias_heads * S * T) : undefined,
      biasShape: c.bias ? [c.bias_batch, c.bias_heads, S, T] : undefined,
      emptyRows: c.empty_rows === 1 ? 'zero' : 'nan',
    };
    const [q, k] = [floats(c.q, B * S * D), floats(c.k, B * T * kvD)];
    const v = kind === 'attention' ? floats(c.v, B * T * kvD) : new Float32Array(B * T * kvD);
    const lse = new Float64Array(B * H * S);
    const weights = new Float64Array(B * H * S * T);
    const out = attention(q, k, v, shape, undefined, { lse, weights });
    if (kind === 'weights') wasm.HEAPF32.set(Float32Array.from(weights), c.out >>> 2);
    else wasm.HEAPF32.set(out, c.out >>> 2);
    if (c.lse) wasm.HEAPF32.set(Float32Array.from(lse), c.lse >>> 2);
    return 0;
  };
  wasm._mha_attention = (at) => run('attention', at);
  wasm._mha_attention_weights = (at) => run('weights', at);
  return calls;
}

const cases = loadGoldenCases(goldenV2Dir).filter((c) => c.kind === 'stateless');

for (const [label, createOptions] of [
  ['simd', {}],
  ['simd-threads (2 threads)', { threads: 2 }],
]) {
  test(`${label}, stand-in core: every stateless v2 case gives out64, lse64 and weights64 through the struct`, async () => {
    const mha = await createMHA({ ...createOptions, warmup: false });
    try {
      const calls = installStandIn(mha);
      for (const c of cases) {
        const [q, k, v, out64, out32, weights64, lse64] = ['q', 'k', 'v', 'out64', 'out32', 'weights64', 'lse64'].map(
          (role) => readGolden(c, role),
        );
        const options = goldenOptions(c);
        const lse = new Float32Array(lse64.length);
        const r = checkOut(mha.multiHeadAttention(q, k, v, { ...options, lse }), out64, out32);
        assert.ok(r.ok, `${c.name}: ${r.problem}`);
        const l = checkLse(lse, lse64);
        assert.ok(l.ok, `${c.name}: ${l.problem}`);
        const w = checkWeights(mha.attentionWeights(q, k, options), weights64);
        assert.ok(w.ok, `${c.name}: weights: ${w.problem}`);
      }
      assert.equal(calls.length, 2 * cases.length);
    } finally {
      mha.dispose();
    }
  });
}

test('stand-in core: the struct carries each option as given (random shapes and options, bits of the reference)', async () => {
  const mha = await createMHA({ warmup: false });
  try {
    const calls = installStandIn(mha);
    const random = mulberry32(4242);
    const pick = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
    for (let trial = 0; trial < 80; trial++) {
      const numKvHeads = pick(1, 3);
      const numHeads = numKvHeads * pick(1, 3);
      const headDim = pick(1, 9);
      const o = {
        batch: pick(1, 3),
        seqLen: pick(1, 9),
        kvSeqLen: pick(1, 11),
        dModel: numHeads * headDim,
        numHeads,
        numKvHeads,
      };
      if (random() < 0.5) o.causal = true;
      if (random() < 0.5) o.queryOffset = pick(0, 6);
      if (random() < 0.4)
        o.kvLengths =
          random() < 0.5
            ? Array.from({ length: o.batch }, () => pick(0, o.kvSeqLen))
            : Int32Array.from({ length: o.batch }, () => pick(0, o.kvSeqLen));
      if (random() < 0.4) o.window = [random() < 0.3 ? Infinity : pick(0, 4), random() < 0.3 ? Infinity : pick(0, 4)];
      if (random() < 0.4) o.softcap = 0.5 + random() * 10;
      if (random() < 0.4) o.alibiSlopes = Array.from({ length: numHeads }, () => random());
      if (random() < 0.4) {
        o.biasShape = [random() < 0.5 ? 1 : o.batch, random() < 0.5 ? 1 : numHeads, o.seqLen, o.kvSeqLen];
        o.bias = randomNormal(
          o.biasShape.reduce((x, y) => x * y),
          random,
        );
      }
      if (random() < 0.3) o.mask = Array.from({ length: o.batch * o.seqLen * o.kvSeqLen }, () => random() < 0.7);
      if (random() < 0.4) o.emptyRows = random() < 0.5 ? 'zero' : 'nan';
      if (random() < 0.3) o.scale = random() - 0.2;
      const kvLength = o.batch * o.kvSeqLen * numKvHeads * headDim;
      const [q, k, v] = [o.batch * o.seqLen * o.dModel, kvLength, kvLength].map((n) => randomNormal(n, random));
      // The reference on float32 inputs: slopes, scale and softcap are float32 in the struct.
      const f32 = (x) => (x === undefined ? undefined : Math.fround(x));
      const expected = referenceAll(q, k, v, {
        ...o,
        scale: f32(o.scale),
        softcap: f32(o.softcap),
        alibiSlopes: o.alibiSlopes && Float32Array.from(o.alibiSlopes),
      });
      const lse = new Float32Array(o.batch * numHeads * o.seqLen);
      const label = `trial ${trial} ${JSON.stringify({ ...o, bias: o.bias && 'bias', mask: o.mask && 'mask' })}`;
      assert.ok(
        bitsEqual(mha.multiHeadAttention(q, k, v, { ...o, lse }), Float32Array.from(expected.out)),
        `${label}: out`,
      );
      assert.ok(bitsEqual(lse, Float32Array.from(expected.lse)), `${label}: lse`);
      assert.ok(bitsEqual(mha.attentionWeights(q, k, o), Float32Array.from(expected.weights)), `${label}: weights`);
      const last = calls.at(-1);
      assert.equal(last.kind, 'weights');
      assert.equal(last.lse, 0, `${label}: attentionWeights passed an lse address`);
      assert.equal(last.v, 0, `${label}: attentionWeights passed a v address`);
    }
  } finally {
    mha.dispose();
  }
});

test('stand-in core: batch groups carry their slice of q, k, v, mask, bias, key lengths and lse; a broadcast bias is staged once', async () => {
  const mha = await createMHA({ warmup: false });
  try {
    const calls = installStandIn(mha);
    // Staged per item (the result goes over the staged q): q 96*512*4, k and v 2*96*256*4 (2 KV heads of 128),
    // the mask 96*96, a bias with a batch dim its item's slice, lse 4*96*4. Groups of floor(1 MiB / that).
    const o = {
      batch: 5,
      seqLen: 96,
      kvSeqLen: 96,
      dModel: 512,
      numHeads: 4,
      numKvHeads: 2,
      kvLengths: [96, 50, 1, 0, 77],
      emptyRows: 'zero',
    };
    const random = mulberry32(77);
    const kvLength = 5 * 96 * 256;
    const [q, k, v] = [5 * 96 * 512, kvLength, kvLength].map((n) => randomNormal(n, random));
    o.mask = Uint8Array.from({ length: 5 * 96 * 96 }, () => (random() < 0.8 ? 1 : 0));
    for (const biasShape of [
      [5, 4, 96, 96],
      [1, 4, 96, 96],
      [5, 1, 96, 96],
    ]) {
      const perItem =
        96 * 512 * 4 + 2 * 96 * 256 * 4 + 96 * 96 + (biasShape[0] > 1 ? biasShape[1] * 96 * 96 * 4 : 0) + 4 * 96 * 4;
      const group = Math.floor(2 ** 20 / perItem);
      const batches = Array.from({ length: Math.ceil(5 / group) }, (_, n) => Math.min(group, 5 - n * group));
      assert.ok(batches.length > 1, 'the shape must be staged in groups');
      const bias = randomNormal(
        biasShape.reduce((x, y) => x * y),
        random,
      );
      const options = { ...o, bias, biasShape };
      const expected = referenceAll(q, k, v, options);
      const lse = new Float32Array(5 * 4 * 96);
      calls.length = 0;
      const out = mha.multiHeadAttention(q, k, v, { ...options, lse });
      assert.deepEqual(
        calls.map((c) => c.batch),
        batches,
        `${biasShape}: batch groups`,
      );
      assert.deepEqual(
        calls.map((c) => c.bias_batch),
        biasShape[0] === 1 ? batches.map(() => 1) : batches,
        `${biasShape}: bias_batch per group`,
      );
      assert.deepEqual(
        calls.map((c) => c.bias_heads),
        batches.map(() => biasShape[1]),
        `${biasShape}: bias_heads`,
      );
      if (biasShape[0] === 1)
        assert.equal(new Set(calls.map((c) => c.bias)).size, 1, 'a broadcast bias is one staged copy for every group');
      assert.equal(
        calls[1].kv_lengths - calls[0].kv_lengths,
        group * 4,
        'the second group reads the key lengths of its items',
      );
      assert.ok(bitsEqual(out, Float32Array.from(expected.out)), `${biasShape}: out`);
      assert.ok(bitsEqual(lse, Float32Array.from(expected.lse)), `${biasShape}: lse`);
      // The same call with the bias and lse as heap tensors: addressed per group, not staged (so the groups
      // hold more items).
      const tensorGroup = Math.floor(2 ** 20 / (96 * 512 * 4 + 2 * 96 * 256 * 4 + 96 * 96));
      const [tBias, tLse] = [heapCopy(mha, bias), mha.allocate(lse.length)];
      calls.length = 0;
      const out2 = mha.multiHeadAttention(q, k, v, { ...options, bias: tBias, lse: tLse });
      assert.ok(bitsEqual(out2, out), `${biasShape}: out with heap-tensor bias and lse`);
      assert.ok(bitsEqual(tLse.toArray(), lse), `${biasShape}: heap-tensor lse`);
      assert.equal(calls[0].batch, tensorGroup);
      if (biasShape[0] !== 1)
        assert.equal(
          calls[1].bias - calls[0].bias,
          tensorGroup * biasShape[1] * 96 * 96 * 4,
          'the second group reads its bias slice in place',
        );
      assert.equal(
        calls[1].lse - calls[0].lse,
        tensorGroup * 4 * 96 * 4,
        'the second group writes its lse slice in place',
      );
      tBias.free();
      tLse.free();
    }
  } finally {
    mha.dispose();
  }
});

test('stand-in core: a call without the Part 2 options writes the "none" value of every field the struct documents', async () => {
  const mha = await createMHA({ warmup: false });
  try {
    const calls = installStandIn(mha);
    const x = randomNormal(2 * 5 * 12, mulberry32(5));
    mha.multiHeadAttention(x, x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3, causal: true });
    mha.attentionWeights(x, x, { batch: 2, seqLen: 5, dModel: 12, numHeads: 3 });
    const none = {
      num_kv_heads: 3,
      query_offset: 0,
      window_left: -1,
      window_right: -1,
      bias: 0,
      bias_batch: 1,
      bias_heads: 1,
      kv_lengths: 0,
      alibi_slopes: 0,
      softcap: 0,
      empty_rows: 0,
      lse: 0,
      mask: 0,
    };
    for (const c of calls) {
      assert.deepEqual(Object.fromEntries(Object.keys(none).map((name) => [name, c[name]])), none, `${c.kind}`);
      assert.deepEqual([c.batch, c.seq_len, c.kv_seq_len, c.d_model, c.num_heads], [2, 5, 5, 12, 3]);
      assert.equal(c.scale, Math.fround(1 / Math.sqrt(4)));
    }
    assert.deepEqual(
      calls.map((c) => [c.kind, c.causal]),
      [
        ['attention', 1],
        ['weights', 0],
      ],
    );
  } finally {
    mha.dispose();
  }
});

test('the KV cache call struct: every field is written by each attend (none left from the call before), options as given', async () => {
  const mha = await createMHA({ warmup: false });
  const wasm = mha.wasm;
  const layout = wasm.kvCacheAttendCallLayout();
  const names = Object.keys(layout).filter((name) => name !== 'size');
  const POISON = 0x7badbad7;
  const seen = [];
  const attend = wasm._mha_kv_cache_attend;
  // The stand-in reads the struct, lets the core compute, then poisons the struct: the next attend must
  // write every field again (the call slot is the same while the staging does not grow). The glue's export
  // may replace itself on its first call, so the stand-in is installed again after each.
  const standIn = (at) => {
    const fields = { at, raw: {} };
    for (const name of names) {
      const slot = (at + layout[name]) >>> 2;
      fields.raw[name] = wasm.HEAP32[slot];
      fields[name] = name === 'scale' || name === 'softcap' ? wasm.HEAPF32[slot] : wasm.HEAP32[slot];
    }
    seen.push(fields);
    const status = attend(at);
    wasm._mha_kv_cache_attend = standIn;
    for (const name of names) wasm.HEAP32[(at + layout[name]) >>> 2] = POISON;
    return status;
  };
  wasm._mha_kv_cache_attend = standIn;
  try {
    const cache = mha.createKVCache({ batch: 2, numKvHeads: 1, headDim: 4, capacity: 8 });
    const step = new Float32Array(2 * 1 * 2 * 4);
    const rope = { ...mha.ropeTables({ rotaryDim: 4, positions: 8 }), interleaved: true };
    const kv = new Float32Array(2 * 1 * 4);
    const all = { numHeads: 2, causal: false, window: [3, 1], softcap: 30, alibiSlopes: [0.5, 0.25], scale: 0.75 };
    cache.attend(step, kv, kv, { ...all, emptyRows: 'zero', sinks: [1, 2], rope, newTokens: [1, 0] });
    cache.attend(step, kv, kv, { numHeads: 2 });
    cache.attend(step, kv, kv, { ...all, emptyRows: 'zero', sinks: [1, 2], rope, tensorDType: 'float32' });
    assert.equal(seen.length, 3);
    assert.equal(seen[1].at, seen[0].at, 'the call slot moved: the poison test would prove nothing');
    for (const [i, fields] of seen.entries()) {
      for (const name of names) assert.notEqual(fields.raw[name], POISON, `call ${i}: ${name} left unwritten`);
    }
    const [first, plain, third] = seen;
    assert.equal(first.cache, plain.cache);
    assert.deepEqual(
      [first.causal, first.window_left, first.window_right, first.empty_rows, first.scale, first.softcap],
      [0, 3, 1, 1, 0.75, 30],
    );
    assert.ok(first.alibi_slopes && first.sinks && first.rope_cos && first.rope_sin && first.new_token_counts);
    assert.deepEqual(
      [first.rope_positions, first.rope_rotary_dim, first.rope_interleaved, first.rope_first_position],
      [1, 4, 1, 0],
    );
    assert.deepEqual([first.new_tokens, first.num_heads], [1, 2]);
    // Without options: causal, and 0 for "none" in every option field (-1 for the unbounded window).
    assert.deepEqual(
      [plain.causal, plain.window_left, plain.window_right, plain.empty_rows, plain.softcap, plain.alibi_slopes],
      [1, -1, -1, 0, 0, 0],
    );
    assert.deepEqual(
      [
        plain.sinks,
        plain.rope_cos,
        plain.rope_sin,
        plain.rope_positions,
        plain.rope_rotary_dim,
        plain.rope_first_position,
      ],
      [0, 0, 0, 0, 0, 0],
    );
    assert.equal(plain.scale, Math.fround(1 / 2));
    assert.equal(plain.new_token_counts, 0);
    // Lengths are now [2, 1]: the rope rows staged start at the shortest sequence's length.
    assert.deepEqual([third.rope_first_position, third.rope_positions], [1, 3]);
  } finally {
    wasm._mha_kv_cache_attend = attend;
    mha.dispose();
  }
});
