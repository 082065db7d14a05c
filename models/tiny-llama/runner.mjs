// A Llama-family runner: loads a Hugging Face Llama-convention checkpoint (config.json + model.safetensors
// with F16, BF16 or F32 tensors; LlamaForCausalLM, and the Qwen2 / Mistral variants: q/k/v biases, an
// untied lm_head, a sliding window) and runs the decoder in plain JS, with attention, rope and the K/V of
// B sequences of different lengths in mha-wasm KV caches (docs/spec.md Part 3, 4.5, 4.6, Part 5). Plain ESM
// importing only models/lib and this folder, for Node, pages and Workers; the caller passes the mha-wasm
// instance in.
//
// Shapes, with the letters of docs/spec.md: B sequences, n new tokens of one call (the longest of the B;
// R = the real rows of all B, without padding), T tokens held, D = hidden_size, H query heads, Hkv KV
// heads, Dh = head_dim, I = intermediate_size, V = vocab_size.
import { parseSafetensors, takeTensor } from '../lib/safetensors.mjs';
import { addInPlace, linear } from '../lib/dense.mjs';

export { generate, generateBatch } from '../lib/generate.mjs';
import { checkLoadedCache, checkState, loadCache } from './session-state.mjs';

const WHO = 'llama';
/** Most tokens a session with ring caches appends in one call (forwardBatch cuts longer lists). */
const RING_CHUNK = 64;
const ARCHITECTURES = ['LlamaForCausalLM', 'Qwen2ForCausalLM', 'MistralForCausalLM'];

/** The config fields the runner uses, checked, with HF's defaults. */
function readConfig(config) {
  if (typeof config !== 'object' || config === null)
    throw new TypeError(
      `loadLlama: config: expected the object of config.json, got ${config === null ? 'null' : typeof config}`,
    );
  for (const key of [
    'vocab_size',
    'hidden_size',
    'intermediate_size',
    'num_hidden_layers',
    'num_attention_heads',
    'max_position_embeddings',
  ]) {
    if (!Number.isInteger(config[key]) || config[key] < 1)
      throw new RangeError(`loadLlama: config.${key}: expected a positive integer, got ${config[key]}`);
  }
  const arch = config.architectures?.[0];
  if (arch !== undefined && !ARCHITECTURES.includes(arch))
    throw new RangeError(`loadLlama: config.architectures: expected one of ${ARCHITECTURES.join(', ')}, got ${arch}`);
  if ((config.hidden_act ?? 'silu') !== 'silu')
    throw new RangeError(`loadLlama: config.hidden_act: expected silu, got ${config.hidden_act}`);
  if (config.rope_scaling != null)
    throw new RangeError(
      `loadLlama: config.rope_scaling: expected null (plain rope), got ${JSON.stringify(config.rope_scaling)}`,
    );
  const H = config.num_attention_heads,
    Hkv = config.num_key_value_heads ?? H;
  if (!Number.isInteger(Hkv) || Hkv < 1 || H % Hkv)
    throw new RangeError(
      `loadLlama: config.num_key_value_heads: expected a divisor of num_attention_heads = ${H}, got ${Hkv}`,
    );
  const Dh = config.head_dim ?? config.hidden_size / H;
  if (!Number.isInteger(Dh) || Dh < 2 || Dh % 2)
    throw new RangeError(
      `loadLlama: config.head_dim: expected an even integer (default hidden_size / num_attention_heads), got ${Dh}`,
    );
  const L = config.num_hidden_layers;
  // HF: Mistral windows every layer; Qwen2 only with use_sliding_window, from layer max_window_layers on;
  // layer_types, when given, says it per layer
  const W = config.sliding_window;
  if (W != null && (!Number.isInteger(W) || W < 1))
    throw new RangeError(`loadLlama: config.sliding_window: expected a positive integer or null, got ${W}`);
  const windowed = Array.from({ length: L }, (_, i) => {
    if (W == null || config.use_sliding_window === false) return false;
    if (config.layer_types) return config.layer_types[i] === 'sliding_attention';
    return i >= (config.use_sliding_window ? (config.max_window_layers ?? 0) : 0);
  });
  return {
    V: config.vocab_size,
    D: config.hidden_size,
    I: config.intermediate_size,
    L,
    H,
    Hkv,
    Dh,
    eps: config.rms_norm_eps ?? 1e-6,
    theta: config.rope_theta ?? 10000,
    nCtx: config.max_position_embeddings,
    // a window of W keys that includes the query's own: docs/spec.md 2.3, [W - 1, 0]
    windows: windowed.map((w) => (w ? [W - 1, 0] : undefined)),
    tied: config.tie_word_embeddings ?? false,
  };
}

/**
 * Builds the model from the parsed config.json and the bytes of model.safetensors (HF tensor names:
 * model.embed_tokens.weight, model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
 * post_attention_layernorm, mlp.{gate,up,down}_proj}.weight, q/k/v biases if present, model.norm.weight,
 * lm_head.weight unless tied).
 * @param {object} config
 * @param {ArrayBuffer} safetensorsBuffer
 */
export function loadLlama(config, safetensorsBuffer) {
  const c = readConfig(config);
  const tensors = parseSafetensors(safetensorsBuffer);
  const { V, D, I, H, Hkv, Dh } = c;
  const get = (name, shape) => takeTensor(tensors, name, shape, WHO);
  const optional = (name, shape) => (tensors.has(name) ? get(name, shape) : null);
  const layers = Array.from({ length: c.L }, (_, i) => {
    const p = `model.layers.${i}.`;
    return {
      inputNorm: get(`${p}input_layernorm.weight`, [D]),
      q: {
        weight: get(`${p}self_attn.q_proj.weight`, [H * Dh, D]),
        bias: optional(`${p}self_attn.q_proj.bias`, [H * Dh]),
      },
      k: {
        weight: get(`${p}self_attn.k_proj.weight`, [Hkv * Dh, D]),
        bias: optional(`${p}self_attn.k_proj.bias`, [Hkv * Dh]),
      },
      v: {
        weight: get(`${p}self_attn.v_proj.weight`, [Hkv * Dh, D]),
        bias: optional(`${p}self_attn.v_proj.bias`, [Hkv * Dh]),
      },
      o: get(`${p}self_attn.o_proj.weight`, [D, H * Dh]),
      postNorm: get(`${p}post_attention_layernorm.weight`, [D]),
      gate: get(`${p}mlp.gate_proj.weight`, [I, D]),
      up: get(`${p}mlp.up_proj.weight`, [I, D]),
      down: get(`${p}mlp.down_proj.weight`, [D, I]),
    };
  });
  const embedding = get('model.embed_tokens.weight', [V, D]);
  const lmHead = tensors.has('lm_head.weight')
    ? get('lm_head.weight', [V, D])
    : c.tied
      ? embedding
      : get('lm_head.weight', [V, D]);
  return new Llama(config, c, { embedding, layers, norm: get('model.norm.weight', [D]), lmHead });
}

/**
 * Fetches config.json and model.safetensors from a folder URL (pages and Workers).
 * @param {string | URL} folderUrl e.g. new URL('../models/tiny-llama/', import.meta.url)
 */
export async function fetchLlama(folderUrl) {
  const base = new URL(folderUrl, globalThis.location?.href);
  const [configResponse, weightsResponse] = await Promise.all([
    fetch(new URL('config.json', base)),
    fetch(new URL('model.safetensors', base)),
  ]);
  for (const r of [configResponse, weightsResponse])
    if (!r.ok) throw new Error(`fetchLlama: fetching ${r.url} failed: HTTP ${r.status}`);
  return loadLlama(await configResponse.json(), await weightsResponse.arrayBuffer());
}

/** RMSNorm over the last axis, as HF's LlamaRMSNorm: x (n, D) -> w * x / sqrt(mean(x^2) + eps). */
function rmsNorm(x, n, D, weight, eps, y = new Float32Array(n * D)) {
  for (let i = 0; i < n; i++) {
    const row = i * D;
    let squares = 0;
    for (let e = 0; e < D; e++) squares += x[row + e] * x[row + e];
    const inv = 1 / Math.sqrt(squares / D + eps);
    for (let e = 0; e < D; e++) y[row + e] = weight[e] * (x[row + e] * inv);
  }
  return y;
}

/** gate <- silu(gate) * up, elementwise (SwiGLU). */
function swiglu(gate, up) {
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i];
    gate[i] = (g / (1 + Math.exp(-g))) * up[i];
  }
  return gate;
}

/** rows (R, width) -> (B, n, width) with zero padding, or back: the real rows of a ragged call. */
function concat(a, b) {
  const out = new Float32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function scatterRows(rows, index, width, padded) {
  for (let r = 0; r < index.length; r++) padded.set(rows.subarray(r * width, (r + 1) * width), index[r] * width);
  return padded;
}
function gatherRows(padded, index, width) {
  const rows = new Float32Array(index.length * width);
  for (let r = 0; r < index.length; r++) rows.set(padded.subarray(index[r] * width, (index[r] + 1) * width), r * width);
  return rows;
}

export class Llama {
  constructor(config, dims, weights) {
    /** config.json as given */
    this.config = config;
    this.dims = dims;
    this.weights = weights;
  }

  /**
   * B new sequences, their K/V in one mha-wasm KV cache per layer.
   * @param {{createKVCache: Function, ropeTables: Function}} mha an instance from createMHA()
   * @param {{batch?: number, dtype?: string, arithmetic?: 'float' | 'integer', capacity?: number, prefix?: LlamaSession, ring?: boolean}} [options]
   *   capacity: tokens per sequence, default max_position_embeddings; prefix: a session of one sequence of
   *   this model and instance whose tokens come before every sequence's own (docs/spec.md 5.2: its caches
   *   are the layers' shared prefixes, read, never written; it must not change while this session runs);
   *   ring: the sliding-window layers' caches are rings of their window plus RING_CHUNK tokens
   *   (docs/spec.md 5.5), so that they stay that size however long the sequences run
   */
  createSession(
    mha,
    { batch = 1, dtype = 'float32', arithmetic, capacity = this.dims.nCtx, prefix, ring = false } = {},
  ) {
    if (typeof mha?.createKVCache !== 'function' || typeof mha?.ropeTables !== 'function') {
      throw new TypeError(
        `Llama.createSession: mha: expected an mha-wasm instance with createKVCache and ropeTables, got ${mha?.info?.version ?? typeof mha}`,
      );
    }
    if (!Number.isInteger(batch) || batch < 1)
      throw new RangeError(`Llama.createSession: batch: expected a positive integer, got ${batch}`);
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(`Llama.createSession: capacity: expected a positive integer, got ${capacity}`);
    if (prefix !== undefined && !(prefix instanceof LlamaSession && prefix.model === this && prefix.batch === 1))
      throw new TypeError('Llama.createSession: prefix: expected a session of batch 1 of this model');
    if (ring && prefix) throw new TypeError('Llama.createSession: ring: expected no prefix with ring caches');
    return new LlamaSession(this, mha, { batch, dtype, arithmetic, capacity, prefix, ring });
  }

  /**
   * A session rebuilt from what LlamaSession.saveState returned (here or in another page, Worker or
   * process): each layer's cache loaded from its bytes (mha.loadKVCache), no token run again. Its dtype and
   * batch are the saved caches'; generate / generateBatch continue it (see models/lib/generate.mjs).
   * @param {{loadKVCache: Function, ropeTables: Function}} mha an instance from createMHA()
   * @param {{tokens: number[][], caches: Uint8Array[]}} state
   * @param {{capacity?: number}} [options] capacity: tokens per sequence, default max_position_embeddings
   */
  restoreSession(mha, state, { capacity = this.dims.nCtx } = {}) {
    const fn = 'Llama.restoreSession';
    if (typeof mha?.loadKVCache !== 'function' || typeof mha?.ropeTables !== 'function') {
      throw new TypeError(
        `${fn}: mha: expected an mha-wasm instance with loadKVCache and ropeTables, got ${mha?.info?.version ?? typeof mha}`,
      );
    }
    const { tokens, caches: saved } = checkState(fn, state, this.dims);
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(`${fn}: capacity: expected a positive integer, got ${capacity}`);
    const caches = [];
    try {
      saved.forEach((bytes, i) => {
        caches.push(loadCache(`${fn}: state.caches[${i}]`, mha, bytes, capacity));
        const cache = caches[i];
        checkLoadedCache(`${fn}: state.caches[${i}]`, cache, tokens, this.dims, caches[0].dtype);
      });
    } catch (error) {
      for (const cache of caches) cache.free();
      throw error;
    }
    const session = new LlamaSession(this, mha, { batch: tokens.length, dtype: caches[0].dtype, capacity, caches });
    session.tokens = tokens;
    return session;
  }
}

/** B sequences being run: their tokens, their K/V (in the caches) and the timings. */
export class LlamaSession {
  /** caches: the loaded ones of restoreSession, else L new ones */
  constructor(model, mha, { batch, dtype, arithmetic, capacity, caches, prefix, ring = false }) {
    const { L, Hkv, Dh, theta, windows } = model.dims;
    this.model = model;
    this.batch = batch;
    this.contextLength = capacity;
    this.prefix = prefix;
    this.caches = caches ?? [];
    if (!caches) {
      try {
        for (let i = 0; i < L; i++) {
          // A window layer's ring: W + n <= capacity for the W = windows[i][0] keys before a query and the
          // n <= RING_CHUNK tokens of one call (forwardBatch cuts longer ones).
          const rings = ring && windows[i] !== undefined;
          const held = rings ? windows[i][0] + RING_CHUNK : capacity;
          this.caches.push(
            mha.createKVCache({ batch, numKvHeads: Hkv, headDim: Dh, capacity: held, dtype, arithmetic, ring: rings }),
          );
        }
        this.ringChunk = ring && windows.some((w) => w !== undefined) ? RING_CHUNK : 0;
      } catch (error) {
        this.free();
        throw error;
      }
    }
    // Positions count from the prefix's first token (docs/spec.md 5.2).
    const positions = (prefix?.contextLength ?? 0) + capacity;
    this.rope = mha.ropeTables({ rotaryDim: Dh, positions, theta });
    /** @type {number[][]} the tokens of each sequence */
    this.tokens = Array.from({ length: batch }, () => []);
    this.timing = { forwardMs: 0, attentionMs: 0, tokens: 0 };
    /**
     * Set it to see each layer's projections before they attend (the demo draws its heads from the queries
     * and the keys the caches hold): called as onProjections(layer, q, k), the call's real rows, q (R, H·Dh)
     * and k (R, Hkv·Dh), not yet rotated.
     * @type {((layer: number, q: Float32Array, k: Float32Array) => void) | null}
     */
    this.onProjections = null;
  }

  /** Tokens held per sequence. */
  get lengths() {
    return this.tokens.map((t) => t.length);
  }

  /** The tokens of each sequence, for models/lib/generate.mjs (a session holding some is continued). */
  get sequences() {
    return this.tokens;
  }

  /**
   * What Llama.restoreSession rebuilds this session from: the tokens of each sequence and one
   * `cache.save()` per layer (docs/cache-format.md), no reference to this session or its heap. The token
   * a generation chose last is not in it (generate returns it but never feeds it): keep it beside the
   * state and pass it as the prompt that continues the restored session.
   * @returns {{tokens: number[][], caches: Uint8Array[]}}
   */
  saveState() {
    if (this.caches.length === 0) throw new TypeError('LlamaSession.saveState: the session was freed (by free())');
    return { tokens: this.tokens.map((t) => t.slice()), caches: this.caches.map((cache) => cache.save()) };
  }

  /**
   * Appends lists[b] to sequence b, all B in one pass (a ragged call when their lengths differ:
   * docs/spec.md 4.6 `newTokens`), and returns per sequence its logits: the last new row's (V), or all new
   * rows' (count_b, V) with allLogits; null for a sequence given no tokens.
   * @param {ArrayLike<number>[]} lists B lists of token ids, not all empty
   * @param {{allLogits?: boolean}} [options]
   * @returns {(Float32Array | null)[]}
   */
  forwardBatch(lists, options = {}) {
    const n = Array.isArray(lists) ? Math.max(0, ...lists.map((list) => list?.length ?? 0)) : 0;
    if (!this.ringChunk || n <= this.ringChunk) return this.#forward(lists, options);
    // Ring caches take at most RING_CHUNK new tokens a call (W + n <= capacity): the lists in slices.
    let results = lists.map(() => null);
    for (let from = 0; from < n; from += this.ringChunk) {
      const part = this.#forward(
        lists.map((list) => Array.prototype.slice.call(list, from, from + this.ringChunk)),
        options,
      );
      results = results.map((r, b) => (part[b] && r && options.allLogits ? concat(r, part[b]) : (part[b] ?? r)));
    }
    return results;
  }

  #forward(lists, { allLogits = false } = {}) {
    const { dims: c, weights: w } = this.model;
    const { V, D, I, H, Hkv, Dh, eps } = c;
    const B = this.batch,
      qWidth = H * Dh,
      kvWidth = Hkv * Dh;
    if (!Array.isArray(lists) || lists.length !== B)
      throw new RangeError(
        `LlamaSession.forwardBatch: lists: expected an array of ${B} token lists, got ${Array.isArray(lists) ? lists.length : typeof lists}`,
      );
    const counts = lists.map((list) => list.length);
    const n = Math.max(...counts);
    if (n < 1)
      throw new RangeError('LlamaSession.forwardBatch: lists: expected at least 1 token in one of them, got 0');
    const index = []; // padded row (b * n + i) of each real row
    lists.forEach((list, b) => {
      if (this.tokens[b].length + list.length > this.contextLength) {
        throw new RangeError(
          `LlamaSession.forwardBatch: lists[${b}]: ${this.tokens[b].length} + ${list.length} tokens exceed the session's capacity of ${this.contextLength}`,
        );
      }
      for (let i = 0; i < list.length; i++) {
        if (!Number.isInteger(list[i]) || list[i] < 0 || list[i] >= V)
          throw new RangeError(
            `LlamaSession.forwardBatch: lists[${b}][${i}]: expected an integer in [0, ${V}), got ${list[i]}`,
          );
        index.push(b * n + i);
      }
    });
    const R = index.length,
      ragged = R < B * n;
    const began = performance.now();

    const x = new Float32Array(R * D); // (R, D)
    let r = 0;
    for (const list of lists) for (const t of list) x.set(w.embedding.subarray(t * D, (t + 1) * D), D * r++);
    const normed = new Float32Array(R * D),
      projected = new Float32Array(R * D);
    const gate = new Float32Array(R * I),
      up = new Float32Array(R * I);
    // The attend call's (B, n, width) tensors; padding rows stay 0 (their k and v are not stored)
    const pad = (rows, width) => (ragged ? scatterRows(rows, index, width, new Float32Array(B * n * width)) : rows);
    const attendOptions = { numHeads: H, rope: this.rope, ...(ragged ? { newTokens: Int32Array.from(counts) } : {}) };

    for (let layer = 0; layer < c.L; layer++) {
      const lw = w.layers[layer];
      rmsNorm(x, R, D, lw.inputNorm, eps, normed);
      const q = linear(normed, R, lw.q.weight, lw.q.bias, D, qWidth);
      const k = linear(normed, R, lw.k.weight, lw.k.bias, D, kvWidth);
      const v = linear(normed, R, lw.v.weight, lw.v.bias, D, kvWidth);
      this.onProjections?.(layer, q, k);
      const attentionBegan = performance.now();
      const window = c.windows[layer];
      const prefix = this.prefix?.caches[layer];
      const out = this.caches[layer].attend(pad(q, qWidth), pad(k, kvWidth), pad(v, kvWidth), {
        ...attendOptions,
        ...(window ? { window } : {}),
        ...(prefix ? { prefix } : {}),
      });
      this.timing.attentionMs += performance.now() - attentionBegan;
      addInPlace(x, linear(ragged ? gatherRows(out, index, qWidth) : out, R, lw.o, null, qWidth, D, projected));
      rmsNorm(x, R, D, lw.postNorm, eps, normed);
      linear(normed, R, lw.gate, null, D, I, gate);
      linear(normed, R, lw.up, null, D, I, up);
      addInPlace(x, linear(swiglu(gate, up), R, lw.down, null, I, D, projected));
    }

    // Final norm and the output projection, on the rows whose logits are returned
    const results = [];
    let first = 0;
    for (let b = 0; b < B; b++) {
      const count = counts[b];
      if (count === 0) {
        results.push(null);
        continue;
      }
      const from = allLogits ? first : first + count - 1,
        rows = first + count - from;
      const finalNormed = rmsNorm(x.subarray(from * D, (first + count) * D), rows, D, w.norm, eps);
      results.push(linear(finalNormed, rows, w.lmHead, null, D, V));
      for (const t of lists[b]) this.tokens[b].push(t);
      first += count;
    }
    this.timing.forwardMs += performance.now() - began;
    this.timing.tokens += R;
    return results;
  }

  /**
   * One sequence (B = 1): appends the tokens, returns the last row's logits (V) or all rows' (n, V).
   * @param {ArrayLike<number>} tokens
   * @param {{allLogits?: boolean}} [options]
   */
  forward(tokens, options) {
    if (this.batch !== 1)
      throw new RangeError(
        `LlamaSession.forward: expected a session of batch 1, got batch ${this.batch} (use forwardBatch)`,
      );
    return this.forwardBatch([tokens], options)[0];
  }

  /**
   * Keeps the first lengths[b] tokens of sequence b (each at most its length).
   * @param {number[]} lengths
   */
  truncateEach(lengths) {
    if (lengths.length !== this.batch)
      throw new RangeError(`LlamaSession.truncateEach: lengths: expected ${this.batch} lengths, got ${lengths.length}`);
    lengths.forEach((m, b) => {
      if (!Number.isInteger(m) || m < 0 || m > this.tokens[b].length)
        throw new RangeError(
          `LlamaSession.truncateEach: lengths[${b}]: expected an integer in [0, ${this.tokens[b].length}], got ${m}`,
        );
    });
    // one length for all is the cache's truncate(n) of Part 3; different ones need 4.6's array form
    const same = lengths.every((m) => m === lengths[0]);
    for (const cache of this.caches) cache.truncate(same ? lengths[0] : lengths);
    lengths.forEach((m, b) => {
      this.tokens[b].length = m;
    });
  }

  /**
   * Beam search's step (docs/spec.md 5.4): sequence b then holds what sequence indices[b] held, in every
   * layer's cache; an index may repeat or be left out.
   * @param {number[]} indices B integers in [0, B)
   */
  reorder(indices) {
    for (const cache of this.caches) cache.reorder(indices);
    this.tokens = indices.map((i) => this.tokens[i].slice());
  }

  /** Keeps the first n tokens of every sequence (fewer where a sequence is shorter). */
  truncate(n) {
    this.truncateEach(this.tokens.map((t) => Math.min(t.length, n)));
  }

  free() {
    for (const cache of this.caches) cache.free();
    this.caches = [];
  }
}
