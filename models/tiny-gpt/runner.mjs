// tiny-gpt runner: loads config.json + model.safetensors and runs the decoder of issue 17 in plain JS, with
// attention delegated to a pluggable backend (attention-backends.mjs, on mha-wasm). Plain ESM importing
// only the code that every runner of models/ shares (models/lib: safetensors, the dense products, the
// generation loop), itself free of Node imports, so the same file runs in Node, in a page and in a Worker.
//
// Shapes, with the letters of docs/spec.md (batch B is always 1 here): S new tokens of one forward call
// (n in the code), T tokens held, D = d_model, H query heads, Hkv KV heads, Dh = D / H; F = d_ff,
// V = vocab_size.
import { parseSafetensors, takeTensor as takeNamedTensor } from '../lib/safetensors.mjs';
import { addInPlace, linear } from '../lib/dense.mjs';
import { generate as generateTokens } from '../lib/generate.mjs';

export { float16Value as float16BitsToFloat32 } from '../../scripts/lib/float16.mjs';
export { parseSafetensors } from '../lib/safetensors.mjs';
export { argmax, sampleToken } from '../lib/generate.mjs';

// ---------------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------------

/**
 * @typedef {object} TinyGPTConfig
 * @property {number} n_layer
 * @property {number} d_model
 * @property {number} n_head
 * @property {number} n_kv_head
 * @property {number} d_ff
 * @property {number} n_ctx
 * @property {number} vocab_size
 * @property {number} layer_norm_eps
 */

/** The weights of one block, by the tensor names of issue 17. */
function blockWeights(tensors, config, i) {
  const { d_model: D, n_head: H, n_kv_head: Hkv, d_ff: F } = config;
  const kvWidth = Hkv * (D / H);
  const get = (suffix, shape) => takeTensor(tensors, `blocks.${i}.${suffix}`, shape);
  return {
    ln1: { weight: get('ln1.weight', [D]), bias: get('ln1.bias', [D]) },
    q: { weight: get('attn.q.weight', [D, D]), bias: get('attn.q.bias', [D]) },
    k: { weight: get('attn.k.weight', [kvWidth, D]), bias: get('attn.k.bias', [kvWidth]) },
    v: { weight: get('attn.v.weight', [kvWidth, D]), bias: get('attn.v.bias', [kvWidth]) },
    o: { weight: get('attn.o.weight', [D, D]), bias: get('attn.o.bias', [D]) },
    ln2: { weight: get('ln2.weight', [D]), bias: get('ln2.bias', [D]) },
    fc: { weight: get('mlp.fc.weight', [F, D]), bias: get('mlp.fc.bias', [F]) },
    proj: { weight: get('mlp.proj.weight', [D, F]), bias: get('mlp.proj.bias', [D]) },
  };
}

function takeTensor(tensors, name, shape) {
  return takeNamedTensor(tensors, name, shape, 'tiny-gpt');
}

/**
 * Builds the model from the parsed config.json and the bytes of model.safetensors.
 * @param {TinyGPTConfig} config
 * @param {ArrayBuffer} safetensorsBuffer
 */
export function loadTinyGPT(config, safetensorsBuffer) {
  for (const key of ['n_layer', 'd_model', 'n_head', 'n_kv_head', 'd_ff', 'n_ctx', 'vocab_size']) {
    if (!Number.isInteger(config[key]) || config[key] < 1)
      throw new RangeError(`tiny-gpt: config.${key}: expected a positive integer, got ${config[key]}`);
  }
  if (config.d_model % config.n_head || config.n_head % config.n_kv_head) {
    throw new RangeError(
      `tiny-gpt: config: n_head must divide d_model and n_kv_head must divide n_head, got ${config.d_model}, ${config.n_head}, ${config.n_kv_head}`,
    );
  }
  const tensors = parseSafetensors(safetensorsBuffer);
  const { d_model: D, n_ctx, vocab_size: V } = config;
  return new TinyGPT(config, {
    tokenEmbedding: takeTensor(tensors, 'tok_emb.weight', [V, D]),
    positionEmbedding: takeTensor(tensors, 'pos_emb.weight', [n_ctx, D]),
    blocks: Array.from({ length: config.n_layer }, (_, i) => blockWeights(tensors, config, i)),
    lnFinal: { weight: takeTensor(tensors, 'ln_f.weight', [D]), bias: takeTensor(tensors, 'ln_f.bias', [D]) },
  });
}

/**
 * Fetches config.json and model.safetensors from a folder URL (pages and Workers; the browser's HTTP
 * cache keeps the weights after the first load).
 * @param {string | URL} folderUrl e.g. new URL('../models/tiny-gpt/', import.meta.url)
 */
export async function fetchTinyGPT(folderUrl) {
  const base = new URL(folderUrl, globalThis.location?.href);
  const [configResponse, weightsResponse] = await Promise.all([
    fetch(new URL('config.json', base)),
    fetch(new URL('model.safetensors', base)),
  ]);
  for (const r of [configResponse, weightsResponse])
    if (!r.ok) throw new Error(`tiny-gpt: fetching ${r.url} failed: HTTP ${r.status}`);
  return loadTinyGPT(await configResponse.json(), await weightsResponse.arrayBuffer());
}

// ---------------------------------------------------------------------------------------------------
// The dense parts of the forward pass
// ---------------------------------------------------------------------------------------------------

/** LayerNorm over the last axis: x (n, D) -> (n, D), biased variance, as torch.nn.LayerNorm. */
function layerNorm(x, n, D, { weight, bias }, eps, y = new Float32Array(n * D)) {
  for (let i = 0; i < n; i++) {
    const row = i * D;
    let mean = 0;
    for (let e = 0; e < D; e++) mean += x[row + e];
    mean /= D;
    let variance = 0;
    for (let e = 0; e < D; e++) {
      const c = x[row + e] - mean;
      variance += c * c;
    }
    const invStd = 1 / Math.sqrt(variance / D + eps);
    for (let e = 0; e < D; e++) y[row + e] = (x[row + e] - mean) * invStd * weight[e] + bias[e];
  }
  return y;
}

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);

/** GELU, tanh approximation (torch's approximate='tanh'), in place. */
function geluTanh(x) {
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    x[i] = 0.5 * v * (1 + Math.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)));
  }
  return x;
}

// ---------------------------------------------------------------------------------------------------
// Model and session
// ---------------------------------------------------------------------------------------------------

/**
 * @typedef {object} AttentionBackend
 * Holds the K/V of every layer of one sequence and runs causal attention over them.
 * @property {(layer: number, q: Float32Array, k: Float32Array, v: Float32Array, n: number) => Float32Array} prefill
 *   n >= 1 new tokens: q (n, H*Dh), k and v (n, Hkv*Dh) -> (n, H*Dh). Stores k and v after the tokens
 *   already held and attends causally over all of them. Called for every layer in order; the last layer's
 *   call advances the length.
 * @property {(layer: number, q: Float32Array, k: Float32Array, v: Float32Array) => Float32Array} step
 *   prefill with n = 1 (a backend may run it differently, e.g. without a mask).
 * @property {(layer: number, q: Float32Array, n: number) => {weights: Float32Array, kvLength: number}} [weights]
 *   optional, after that layer's prefill/step of n tokens: the attention weights (H, n, T) of those
 *   queries over the T = kvLength keys held, for visualization
 * @property {() => number} length tokens held
 * @property {() => Uint8Array[]} [save] optional: the K/V held as bytes (kvCacheBackend: one `cache.save()`
 *   per layer) that the backend factory rebuilds the backend from, as its second argument `saved`
 * @property {(n: number) => void} truncate keep the first n tokens
 * @property {() => void} free
 */

export class TinyGPT {
  /** @param {TinyGPTConfig} config */
  constructor(config, weights) {
    this.config = config;
    this.weights = weights;
  }

  /**
   * A new sequence. createBackend receives the attention geometry of this model.
   * @param {(geometry: {numLayers: number, numHeads: number, numKvHeads: number, headDim: number, capacity: number}) => AttentionBackend} createBackend
   */
  createSession(createBackend) {
    const c = this.config;
    return new Session(this, createBackend(this.geometry()));
  }

  /** The attention geometry a backend factory receives. */
  geometry() {
    const c = this.config;
    return {
      numLayers: c.n_layer,
      numHeads: c.n_head,
      numKvHeads: c.n_kv_head,
      headDim: c.d_model / c.n_head,
      capacity: c.n_ctx,
    };
  }

  /**
   * A session rebuilt from what Session.saveState returned (here or in another page, Worker or process):
   * createBackend gets the saved bytes as its second argument (kvCacheBackend loads one cache per layer
   * from them), no token is run again. generate continues it (see models/lib/generate.mjs).
   * @param {(geometry: object, saved: Uint8Array[]) => AttentionBackend} createBackend e.g. kvCacheBackend(mha, { dtype }), the saved caches' dtype
   * @param {{tokens: number[], caches: Uint8Array[]}} state
   */
  restoreSession(createBackend, state) {
    const fn = 'TinyGPT.restoreSession';
    const { n_ctx, vocab_size: V } = this.config;
    if (typeof state !== 'object' || state === null)
      throw new TypeError(
        `${fn}: state: expected what Session.saveState returned, got ${state === null ? 'null' : typeof state}`,
      );
    const { tokens, caches } = state;
    if (!Array.isArray(tokens))
      throw new TypeError(`${fn}: state.tokens: expected an array of token ids, got ${typeof tokens}`);
    if (tokens.length > n_ctx)
      throw new RangeError(`${fn}: state.tokens: expected at most ${n_ctx} tokens (the context), got ${tokens.length}`);
    tokens.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new RangeError(`${fn}: state.tokens[${i}]: expected an integer in [0, ${V}), got ${t}`);
    });
    if (!Array.isArray(caches))
      throw new TypeError(
        `${fn}: state.caches: expected an array of Uint8Array (one cache.save() per layer), got ${typeof caches}`,
      );
    const backend = createBackend(this.geometry(), caches);
    if (backend.length() !== tokens.length) {
      backend.free();
      throw new RangeError(
        `${fn}: state.caches: expected caches of ${tokens.length} tokens (state.tokens'), got ${backend.length()}`,
      );
    }
    const session = new Session(this, backend);
    session.tokens = tokens.slice();
    return session;
  }
}

/** One sequence being run: its tokens, its K/V (in the backend) and its timings. */
export class Session {
  constructor(model, backend) {
    this.model = model;
    this.backend = backend;
    /** @type {number[]} */
    this.tokens = [];
    this.timing = { forwardMs: 0, attentionMs: 0, tokens: 0 };
    /** @type {{weights: Float32Array, kvLength: number}[] | null} set by forward({attentionWeights: true}) */
    this.attentionWeights = null;
  }

  /**
   * Runs n new tokens at positions [tokens.length, tokens.length + n).
   * @param {ArrayLike<number>} newTokens byte ids
   * @param {{allLogits?: boolean, attentionWeights?: boolean}} [options] allLogits: return (n, V) logits
   *   instead of only the last row's (V); attentionWeights: also set this.attentionWeights to one
   *   {weights (H, n, T), kvLength: T} per layer (needs a backend with `weights`; not counted in the timing)
   * @returns {Float32Array}
   */
  forward(newTokens, { allLogits = false, attentionWeights = false } = {}) {
    const { config: c, weights: w } = this.model;
    const n = newTokens.length;
    const start = this.tokens.length;
    const { d_model: D, n_head: H, n_kv_head: Hkv, d_ff: F, vocab_size: V, layer_norm_eps: eps } = c;
    const kvWidth = Hkv * (D / H);
    if (n < 1) throw new RangeError('Session.forward: newTokens: expected at least 1 token, got 0');
    if (attentionWeights && !this.backend.weights)
      throw new TypeError('Session.forward: attentionWeights: this attention backend cannot return weights');
    if (start + n > c.n_ctx)
      throw new RangeError(`Session.forward: ${start} + ${n} tokens exceed the model's context of ${c.n_ctx}`);
    for (let i = 0; i < n; i++) {
      const t = newTokens[i];
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new RangeError(`Session.forward: newTokens[${i}]: expected an integer in [0, ${V}), got ${t}`);
    }
    const began = performance.now();

    // Embeddings: x (n, D)
    const x = new Float32Array(n * D);
    for (let i = 0; i < n; i++) {
      const tok = newTokens[i] * D,
        pos = (start + i) * D;
      for (let e = 0; e < D; e++) x[i * D + e] = w.tokenEmbedding[tok + e] + w.positionEmbedding[pos + e];
    }
    const normed = new Float32Array(n * D);
    const hidden = new Float32Array(n * F);
    const projected = new Float32Array(n * D);
    const layerWeights = [];
    let excludedMs = 0;

    for (let layer = 0; layer < c.n_layer; layer++) {
      const b = w.blocks[layer];
      // Attention sublayer
      layerNorm(x, n, D, b.ln1, eps, normed);
      const q = linear(normed, n, b.q.weight, b.q.bias, D, D);
      const k = linear(normed, n, b.k.weight, b.k.bias, D, kvWidth);
      const v = linear(normed, n, b.v.weight, b.v.bias, D, kvWidth);
      const attentionBegan = performance.now();
      const attended = n === 1 ? this.backend.step(layer, q, k, v) : this.backend.prefill(layer, q, k, v, n);
      this.timing.attentionMs += performance.now() - attentionBegan;
      if (attentionWeights) {
        const visualizationBegan = performance.now();
        layerWeights.push(this.backend.weights(layer, q, n));
        excludedMs += performance.now() - visualizationBegan;
      }
      addInPlace(x, linear(attended, n, b.o.weight, b.o.bias, D, D, projected));
      // MLP sublayer
      layerNorm(x, n, D, b.ln2, eps, normed);
      geluTanh(linear(normed, n, b.fc.weight, b.fc.bias, D, F, hidden));
      addInPlace(x, linear(hidden, n, b.proj.weight, b.proj.bias, F, D, projected));
    }

    // Final LayerNorm and the output projection tied to the token embedding: (rows, D) -> (rows, V)
    const firstRow = allLogits ? 0 : n - 1;
    const rows = n - firstRow;
    const finalNormed = layerNorm(x.subarray(firstRow * D), rows, D, w.lnFinal, eps);
    const logits = linear(finalNormed, rows, w.tokenEmbedding, null, D, V);

    for (let i = 0; i < n; i++) this.tokens.push(newTokens[i]);
    if (attentionWeights) this.attentionWeights = layerWeights;
    this.timing.forwardMs += performance.now() - began - excludedMs;
    this.timing.tokens += n;
    return logits;
  }

  /**
   * What TinyGPT.restoreSession rebuilds this session from: its tokens and the backend's bytes (one
   * `cache.save()` per layer). The token a generation chose last is not in it (generate returns it but
   * never feeds it): keep it beside the state and pass it as the prompt that continues the restored session.
   * @returns {{tokens: number[], caches: Uint8Array[]}}
   */
  saveState() {
    if (!this.backend.save)
      throw new TypeError('Session.saveState: this attention backend cannot save its K/V (it has no save())');
    return { tokens: this.tokens.slice(), caches: this.backend.save() };
  }

  /** The one sequence of this session, for models/lib/generate.mjs. */
  get batch() {
    return 1;
  }

  /** Its tokens, for models/lib/generate.mjs (a session holding some is continued). */
  get sequences() {
    return [this.tokens];
  }

  get contextLength() {
    return this.model.config.n_ctx;
  }

  /** forward for a batch of one: [the last row's logits (V)]. */
  forwardBatch(lists, options) {
    if (lists.length !== 1)
      throw new RangeError(`Session.forwardBatch: lists: expected 1 (tiny-gpt runs one sequence), got ${lists.length}`);
    return [this.forward(lists[0], options)];
  }

  truncateEach([n]) {
    this.truncate(n);
  }

  /** Keeps the first n tokens (the backend drops their K/V). */
  truncate(n) {
    this.backend.truncate(n);
    this.tokens.length = n;
  }

  free() {
    this.backend.free();
  }
}

// ---------------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------------

/**
 * Generates `count` tokens after `prompt` (models/lib/generate.mjs): when the context is full, the older
 * half of it is dropped and the rest is prefilled again (learned positions cannot go past n_ctx).
 * @param {Session} session a fresh session, or one holding tokens (restored from a saved state, or left by
 *   an earlier call) that `prompt` continues: see models/lib/generate.mjs
 * @param {ArrayLike<number>} prompt byte ids, at least one
 * @param {number} count
 * @param {{greedy?: boolean, temperature?: number, topK?: number, seed?: number, drawn?: number, attentionWeights?: boolean, onToken?: (token: number) => void}} [options]
 *   attentionWeights: every forward call sets session.attentionWeights, so onToken(token) can read the
 *   weights of the call whose logits gave that token
 * @returns {number[]} the generated tokens
 */
export function generate(session, prompt, count, { attentionWeights = false, ...options } = {}) {
  return generateTokens(session, prompt, count, { ...options, forwardOptions: { attentionWeights } });
}
