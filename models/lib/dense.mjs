// The dense parts of a decoder's forward pass that every runner of models/ shares (tiny-gpt, the Llama
// runner): matrix products and residual additions, on Float32Arrays in row-major order. ESM without
// imports, for Node, pages and Workers.

/**
 * y = x W^T + b, as torch.nn.Linear: x (n, In), W (Out, In), b (Out) -> y (n, Out). Four rows of x share
 * each pass over a row of W, so a prefill reads W n/4 times instead of n times; a single row (a decode
 * step) runs four rows of W at once. Either way four sums are independent, which V8's scalar code needs
 * to overlap the additions. Sums run in float64.
 */
export function linear(x, n, weight, bias, inWidth, outWidth, y = new Float32Array(n * outWidth)) {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const x0 = i * inWidth,
      x1 = x0 + inWidth,
      x2 = x1 + inWidth,
      x3 = x2 + inWidth;
    for (let o = 0; o < outWidth; o++) {
      const w = o * inWidth;
      let s0 = 0,
        s1 = 0,
        s2 = 0,
        s3 = 0;
      for (let e = 0; e < inWidth; e++) {
        const we = weight[w + e];
        s0 += x[x0 + e] * we;
        s1 += x[x1 + e] * we;
        s2 += x[x2 + e] * we;
        s3 += x[x3 + e] * we;
      }
      const b = bias ? bias[o] : 0;
      y[i * outWidth + o] = s0 + b;
      y[(i + 1) * outWidth + o] = s1 + b;
      y[(i + 2) * outWidth + o] = s2 + b;
      y[(i + 3) * outWidth + o] = s3 + b;
    }
  }
  for (; i < n; i++) {
    // the last rows: four rows of W at a time instead, for four independent sums
    const xi = i * inWidth,
      yi = i * outWidth;
    let o = 0;
    for (; o + 4 <= outWidth; o += 4) {
      const w0 = o * inWidth,
        w1 = w0 + inWidth,
        w2 = w1 + inWidth,
        w3 = w2 + inWidth;
      let s0 = 0,
        s1 = 0,
        s2 = 0,
        s3 = 0;
      for (let e = 0; e < inWidth; e++) {
        const xe = x[xi + e];
        s0 += xe * weight[w0 + e];
        s1 += xe * weight[w1 + e];
        s2 += xe * weight[w2 + e];
        s3 += xe * weight[w3 + e];
      }
      y[yi + o] = s0 + (bias ? bias[o] : 0);
      y[yi + o + 1] = s1 + (bias ? bias[o + 1] : 0);
      y[yi + o + 2] = s2 + (bias ? bias[o + 2] : 0);
      y[yi + o + 3] = s3 + (bias ? bias[o + 3] : 0);
    }
    for (; o < outWidth; o++) {
      const w = o * inWidth;
      let s = 0;
      for (let e = 0; e < inWidth; e++) s += x[xi + e] * weight[w + e];
      y[yi + o] = s + (bias ? bias[o] : 0);
    }
  }
  return y;
}

/** x += y, elementwise (a residual connection). */
export function addInPlace(x, y) {
  for (let i = 0; i < x.length; i++) x[i] += y[i];
}
