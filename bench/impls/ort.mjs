// onnxruntime-web peers (WASM execution provider, one thread): the standard-op graph and the
// com.microsoft.MultiHeadAttention contrib op. In the browser bench (bench/browser/page.mjs) the page
// imports onnxruntime-web through its import map and gets the standard-op graph's bytes from the runner
// (`model`): onnx-proto, which builds the graphs, is CommonJS and stays in Node.
import * as ort from 'onnxruntime-web';

const models = () => import('../lib/onnx-models.mjs');

async function session(bytes) {
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = 'error';
  return ort.InferenceSession.create(bytes, { executionProviders: ['wasm'], graphOptimizationLevel: 'all' });
}

// One feed/run/dispose wrapper for both graphs; `extra` holds the mask input of a causal run.
function peer(sess, { B, S, T, D, H, Hkv = H }, extra, info) {
  const kvD = (D / H) * Hkv;
  return {
    info: { ort: ort.env.versions?.web ?? 'unknown', threads: ort.env.wasm.numThreads, ...info },
    async run(q, k, v) {
      const feeds = {
        q: new ort.Tensor('float32', q, [B, S, D]),
        k: new ort.Tensor('float32', k, [B, T, kvD]),
        v: new ort.Tensor('float32', v, [B, T, kvD]),
        ...extra,
      };
      const res = await sess.run(feeds);
      const out = res.out.data;
      for (const t of Object.values(res)) if (t !== res.out) t.dispose?.();
      res.out.dispose?.();
      return out;
    },
    async dispose() {
      await sess.release();
    },
  };
}

export async function createStd(shape, { model } = {}) {
  const masked = !!shape.causal;
  if (model !== undefined && masked)
    throw new Error('a given model runs unmasked shapes only (the causal bias is built in Node)');
  const sess = await session(
    model !== undefined ? new Uint8Array(model) : (await models()).standardOpsModel(shape, masked),
  );
  const { S, T } = shape;
  const extra = masked ? { bias: new ort.Tensor('float32', (await models()).causalBias(S, T), [1, 1, S, T]) } : {};
  return peer(sess, shape, extra, { graph: 'standard ops', mask: masked ? 'additive -inf bias (1,1,S,T)' : 'none' });
}

export async function createContrib(shape) {
  const masked = !!shape.causal;
  const { contribModel, causalMaskInt32 } = await models();
  const sess = await session(contribModel(shape, masked));
  const { B, S, T } = shape;
  const extra = masked ? { mask: new ort.Tensor('int32', causalMaskInt32(B, S, T), [B, S, T]) } : {};
  return peer(sess, shape, extra, {
    graph: 'com.microsoft.MultiHeadAttention',
    mask: masked ? 'key_padding_mask int32 (B,S,T), -10000 added' : 'none',
  });
}

/**
 * com.microsoft.GroupQueryAttention over an empty past: onnxruntime's own grouped-query kernel (causal
 * only, S = T). Its present K/V outputs (the cache it would hand to the next step) are part of the call.
 */
export async function createGqa(shape) {
  const sess = await session((await models()).gqaModel(shape));
  const { B, S, D, H } = shape;
  const Hkv = shape.Hkv ?? H;
  const Dh = D / H;
  const extra = {
    past_key: new ort.Tensor('float32', new Float32Array(0), [B, Hkv, 0, Dh]),
    past_value: new ort.Tensor('float32', new Float32Array(0), [B, Hkv, 0, Dh]),
    seqlens_k: new ort.Tensor('int32', new Int32Array(B).fill(S - 1), [B]),
    total_sequence_length: new ort.Tensor('int32', Int32Array.of(S), []),
  };
  return peer(sess, shape, extra, {
    graph: 'com.microsoft.GroupQueryAttention',
    mask: 'causal (the op is always causal)',
  });
}

/**
 * One decode step of com.microsoft.GroupQueryAttention with a past: q (B,1,H·Dh) and the new token's k, v
 * (B,1,Hkv·Dh) against past_key/past_value (B,Hkv,T-1,Dh), given once and fed to every run; the op writes
 * out and the present K/V (B,Hkv,T,Dh), the past with the new token appended, at every call (they are read
 * back and disposed as part of the step). `s` is a decode shape (B, T, H, Hkv, Dh) of bench/lib/jobs.mjs.
 */
export async function createGqaStep(s, { pastKey, pastValue }) {
  const { B, T, H, Hkv, Dh } = s;
  const step = { B, S: 1, T: 1, D: H * Dh, H, Hkv };
  const sess = await session((await models()).gqaModel(step, { pastLength: T - 1 }));
  const extra = {
    past_key: new ort.Tensor('float32', pastKey, [B, Hkv, T - 1, Dh]),
    past_value: new ort.Tensor('float32', pastValue, [B, Hkv, T - 1, Dh]),
    seqlens_k: new ort.Tensor('int32', new Int32Array(B).fill(T - 1), [B]),
    total_sequence_length: new ort.Tensor('int32', Int32Array.of(T), []),
  };
  return peer(sess, step, extra, {
    graph: 'com.microsoft.GroupQueryAttention, past_key/past_value (B,Hkv,T-1,Dh)',
    mask: 'causal (the op is always causal)',
  });
}
