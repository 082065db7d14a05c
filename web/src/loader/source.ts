// Where the wasm comes from (a URL to fetch, a file path in Node, or bytes the caller has), reading its
// bytes, and the checks that the bytes are this release's module: the magic number before compiling, the
// version the module reports after instantiating. Every error says what was read and what was expected.
import { describe } from '../describe.js';
import { VERSION } from '../version.js';
import { importNodeBuiltin, isNode } from './env.js';

/** Where the wasm comes from: a URL to fetch, a file path (Node), or bytes given by the caller. */
export type WasmSource =
  | { kind: 'url'; url: URL; label: string }
  | { kind: 'path'; path: string; label: string }
  | { kind: 'bytes'; bytes: ArrayBuffer | Uint8Array; label: string };

const WASM_MAGIC = [0x00, 0x61, 0x73, 0x6d];
/** What every load error says was expected. */
export const EXPECTED = `expected the WebAssembly file mha.wasm of mha-wasm ${VERSION}`;

/** The source that createMHA's `wasmUrl` or `wasmBinary` names (the caller checked that one is given). */
export function sourceFromOptions(o: Record<string, unknown>): WasmSource {
  if (o.wasmUrl !== undefined && o.wasmBinary !== undefined) {
    throw new TypeError('createMHA: expected at most one of wasmUrl and wasmBinary, got both');
  }
  if (o.wasmBinary !== undefined) {
    const b = o.wasmBinary;
    if (!(b instanceof ArrayBuffer) && !(b instanceof Uint8Array)) {
      throw new TypeError(
        `createMHA: wasmBinary: expected an ArrayBuffer or Uint8Array holding mha.wasm, got ${describe(b)}`,
      );
    }
    return { kind: 'bytes', bytes: b, label: `wasmBinary (${b.byteLength} bytes)` };
  }
  const u = o.wasmUrl;
  if (u instanceof URL) return { kind: 'url', url: u, label: u.href };
  if (typeof u !== 'string') {
    throw new TypeError(`createMHA: wasmUrl: expected a string or URL, got ${describe(u)}`);
  }
  if (u === '') throw new RangeError('createMHA: wasmUrl: expected a URL or path, got an empty string');
  if (isNode()) {
    // In Node a string is a URL when it has a scheme (http:, file:, data:), else a file path
    // (a Windows drive letter such as C: is a path too).
    const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]+):/.exec(u);
    if (scheme && scheme[1]!.length > 1) return { kind: 'url', url: new URL(u), label: u };
    return { kind: 'path', path: u, label: u };
  }
  const base =
    (globalThis as { document?: { baseURI?: string } }).document?.baseURI ??
    (globalThis as { location?: { href?: string } }).location?.href;
  let url: URL;
  try {
    url = new URL(u, base);
  } catch {
    throw new RangeError(
      `createMHA: wasmUrl: expected an absolute URL or one relative to the page, got ${describe(u)}`,
    );
  }
  return { kind: 'url', url, label: url.href };
}

async function readFileNode(path: string | URL): Promise<Uint8Array<ArrayBuffer>> {
  const fs = await importNodeBuiltin<{ readFile(path: string | URL): Promise<Uint8Array<ArrayBuffer>> }>(
    'node:fs/promises',
  );
  const data = await fs.readFile(path);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** Returns the bytes and, for HTTP, the response's content type (to explain a wrong file). */
export async function readWasmBytes(source: WasmSource): Promise<{ bytes: Uint8Array; contentType?: string }> {
  if (source.kind === 'bytes') {
    const b = source.bytes;
    return { bytes: b instanceof Uint8Array ? b : new Uint8Array(b) };
  }
  if (source.kind === 'path' || (source.url.protocol === 'file:' && isNode())) {
    const where = source.kind === 'path' ? source.path : source.url;
    try {
      return { bytes: await readFileNode(where) };
    } catch (error) {
      throw new Error(`mha-wasm: reading ${source.label} failed (${errorText(error)}); ${EXPECTED}`, { cause: error });
    }
  }
  let response: Response;
  try {
    response = await fetch(source.url);
  } catch (error) {
    throw new Error(`mha-wasm: fetching ${source.label} failed (${errorText(error)}); ${EXPECTED}`, { cause: error });
  }
  if (!response.ok) {
    throw new Error(
      `mha-wasm: fetching ${source.label} failed: HTTP ` +
        `${response.status}${response.statusText ? ` ${response.statusText}` : ''}; ` +
        `${EXPECTED} there (host it, or pass createMHA({ wasmUrl }) / ({ wasmBinary }))`,
    );
  }
  const contentType = response.headers.get('content-type') ?? undefined;
  return { bytes: new Uint8Array(await response.arrayBuffer()), ...(contentType ? { contentType } : {}) };
}

/** An error's message with its code and causes (Node's fetch says only "fetch failed"; the reason is its cause). */
export function errorText(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    const text =
      typeof code === 'string' && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
    return error.cause !== undefined && error.cause !== null ? `${text}: ${errorText(error.cause)}` : text;
  }
  return String(error);
}

/** Throws a precise Error unless `bytes` start with the wasm magic number. */
export function checkMagic(label: string, bytes: Uint8Array, contentType: string | undefined): void {
  if (bytes.length >= 4 && WASM_MAGIC.every((b, i) => bytes[i] === b)) return;
  const head = Array.from(bytes.subarray(0, 4), (b) => b.toString(16).padStart(2, '0')).join(' ');
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(0, 64)).trimStart().toLowerCase();
  const looksHtml =
    text.startsWith('<!doctype html') ||
    text.startsWith('<html') ||
    text.startsWith('<') ||
    (contentType ?? '').includes('html');
  const what =
    bytes.length === 0
      ? 'an empty file'
      : `${bytes.length} bytes starting ` +
        `${head}${looksHtml ? ', an HTML page (a dev server or CDN fallback page instead of the file?)' : ''}`;
  throw new Error(
    `mha-wasm: ${label} is not a WebAssembly file: ${EXPECTED} (magic bytes 00 61 73 6d), got ${what}` +
      `${contentType ? ` served as ${contentType}` : ''}`,
  );
}

/** The glue and the .wasm must come from one release: the wasm reports its version. */
export function checkWasmVersion(label: string, wasmVersion: string): void {
  if (wasmVersion !== VERSION) {
    throw new Error(
      `mha-wasm: version mismatch: the script is ${VERSION} but ${label} is ${wasmVersion}; ` +
        "serve the mha.wasm of the script's release",
    );
  }
}
