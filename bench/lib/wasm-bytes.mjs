// The bytes of hand-assembled WebAssembly modules: LEB128, names, sections, vectors. Shared by the
// mul+add ceiling (ceiling.mjs) and the bandwidth ceiling (bandwidth.mjs). Isomorphic: no imports.

/** Unsigned LEB128. */
export function uleb(n) {
  const out = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

export const str = (s) => [...uleb(s.length), ...[...s].map((c) => c.charCodeAt(0))];
export const section = (id, body) => [id, ...uleb(body.length), ...body];
export const vec = (items) => [...uleb(items.length), ...items.flat()];
