// What the golden checks of models/ share (tiny-gpt's and tiny-llama's, in Node and in pages): fetching a
// model's golden files and comparing a JS runner's logits with PyTorch's. ESM without imports.
//
// Shapes: V = vocabulary size; a logits block of `rows` positions is (rows, V), row-major.

/**
 * A reader of the files of `folderUrl`/golden/ over fetch (pages and Workers), for a golden reader that
 * takes `readFile(file) -> bytes`.
 * @param {string | URL} folderUrl the model's folder
 * @param {string} who the model, for the error message
 * @returns {(file: string) => Promise<ArrayBuffer>}
 */
export function goldenFetcher(folderUrl, who) {
  const base = new URL('golden/', new URL(folderUrl, globalThis.location?.href));
  return async (file) => {
    const response = await fetch(new URL(file, base));
    if (!response.ok) throw new Error(`${who} golden: fetching ${response.url} failed: HTTP ${response.status}`);
    return response.arrayBuffer();
  };
}

/**
 * Logits (rows, V) against the reference rows [firstRow, firstRow + rows) of (positions, V): every one
 * within tolerance * max(1, |reference|). worst = the largest |diff| / allowed, worstAbs the largest
 * |diff|; message names the first logit out of tolerance, or the length mismatch.
 */
export function compareLogits(actual, reference, firstRow, rows, V, tolerance = 1e-4) {
  if (actual.length !== rows * V)
    return { ok: false, worst: Infinity, message: `logits length: expected ${rows * V}, got ${actual.length}` };
  let worst = 0,
    worstAbs = 0;
  for (let r = 0; r < rows; r++) {
    for (let t = 0; t < V; t++) {
      const expected = reference[(firstRow + r) * V + t];
      const got = actual[r * V + t];
      const diff = Math.abs(got - expected);
      const ratio = diff / (tolerance * Math.max(1, Math.abs(expected)));
      if (!(ratio <= 1))
        return {
          ok: false,
          worst: ratio,
          worstAbs: diff,
          message: `position ${firstRow + r}, byte ${t}: got ${got}, PyTorch ${expected}`,
        };
      worst = Math.max(worst, ratio);
      worstAbs = Math.max(worstAbs, diff);
    }
  }
  return { ok: true, worst, worstAbs, message: '' };
}
