// @tensorflow/tfjs-backend-wasm peer (tfjs-core functional API; single-threaded under Node).
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-wasm';

export async function create(shape) {
  const ok = await tf.setBackend('wasm');
  if (!ok) throw new Error('tf.setBackend("wasm") returned false');
  await tf.ready();
  const { B, S, T, D, H } = shape;
  const Dh = D / H;
  const scale = tf.scalar(Math.fround(1 / Math.sqrt(Dh)));
  let bias = null;
  if (shape.causal) {
    // Broadcast additive bias (1,1,S,T): 0 where j <= i, -inf elsewhere (far cheaper than tf.where).
    const b = new Float32Array(S * T);
    for (let i = 0; i < S; i++) for (let j = i + 1; j < T; j++) b[i * T + j] = -Infinity;
    bias = tf.tensor4d(b, [1, 1, S, T]);
  }
  return {
    info: { tfjs: tf.version_core, backend: tf.getBackend(), mask: bias ? 'additive -inf bias (1,1,S,T)' : 'none' },
    async run(q, k, v) {
      // Return the tensor from tidy and read it outside: tidy scans returned values.
      const out = tf.tidy(() => {
        const qh = tf.transpose(tf.reshape(tf.tensor3d(q, [B, S, D]), [B, S, H, Dh]), [0, 2, 1, 3]);
        const kh = tf.transpose(tf.reshape(tf.tensor3d(k, [B, T, D]), [B, T, H, Dh]), [0, 2, 1, 3]);
        const vh = tf.transpose(tf.reshape(tf.tensor3d(v, [B, T, D]), [B, T, H, Dh]), [0, 2, 1, 3]);
        let scores = tf.mul(tf.matMul(qh, kh, false, true), scale);
        if (bias) scores = tf.add(scores, bias);
        const probs = tf.softmax(scores, -1);
        const oh = tf.matMul(probs, vh);
        return tf.reshape(tf.transpose(oh, [0, 2, 1, 3]), [B, S, D]);
      });
      const data = out.dataSync();
      out.dispose();
      return data;
    },
    async dispose() {
      scale.dispose();
      bias?.dispose();
    },
  };
}
