// A small dependency-free static file server for the demo and the browser tests.
//
// Every response carries the cross-origin isolation headers (COOP same-origin + COEP require-corp),
// so pages get SharedArrayBuffer and fine-grained timers, and the threaded wasm build works unchanged.
// `isolation: false` leaves them out (tests of the single-threaded fallback).
// `.wasm` is served as application/wasm, which WebAssembly.compileStreaming requires. Files carry an ETag
// (size and mtime) with `Cache-Control: no-cache`, so browsers revalidate and get a 304 for unchanged ones.
//
//   import { serve } from './scripts/serve.mjs';
//   const { url, close } = await serve({ port: 0 });           // repo root, random free port
//   const s = await serve({ root: 'dist', mounts: { '/demo/': 'web/demo' } });
import { createServer } from 'node:http';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file lives in scripts/). */
export const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

/** Content types by lower-case file extension. Anything else is application/octet-stream. */
export const MIME_TYPES = Object.freeze({
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.cjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.csv': 'text/csv; charset=utf-8',
});

/** Headers sent with every response, errors included. */
export const ISOLATION_HEADERS = Object.freeze({
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cross-Origin-Resource-Policy': 'same-origin',
});

/** Returns the content type for a file path. */
export function mimeType(path) {
  return MIME_TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
}

function send(res, status, headers, body, isolation = ISOLATION_HEADERS) {
  res.writeHead(status, { ...isolation, 'Cache-Control': 'no-cache', ...headers });
  res.end(body);
}

function text(res, status, message, head, isolation) {
  const headers = { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(message) };
  send(res, status, headers, head ? undefined : message, isolation);
}

/**
 * Builds the request handler.
 *
 * @param {object} [options]
 * @param {string} [options.root] - directory served at `/` (default: the repository root); relative paths
 *   resolve against the repository root
 * @param {Record<string, string>} [options.mounts] - extra URL prefix -> directory, e.g. `{ '/demo/': 'web/demo' }`;
 *   the longest matching prefix wins over `root`
 * @param {Record<string, string>} [options.redirects] - exact path -> location (default: `/` -> `/web/demo/`
 *   when serving the repository root)
 * @param {boolean} [options.isolation] - send the cross-origin isolation headers (default true)
 * @returns {(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void}
 */
export function createHandler({ root = REPO_ROOT, mounts = {}, redirects, isolation = true } = {}) {
  const iso = isolation ? ISOLATION_HEADERS : {};
  const rootDir = resolve(REPO_ROOT, root);
  const redirectMap = redirects ?? (rootDir === REPO_ROOT ? { '/': '/web/demo/' } : {});
  const mountList = Object.entries(mounts)
    .map(([prefix, dir]) => [prefix.endsWith('/') ? prefix : `${prefix}/`, resolve(REPO_ROOT, dir)])
    .sort((a, b) => b[0].length - a[0].length);

  return async function handle(req, res) {
    const head = req.method === 'HEAD';
    if (req.method !== 'GET' && !head) {
      res.setHeader('Allow', 'GET, HEAD');
      return text(res, 405, 'method not allowed\n', head, iso);
    }
    let pathname;
    try {
      pathname = decodeURIComponent(new URL(req.url ?? '/', 'http://localhost').pathname);
    } catch {
      return text(res, 400, 'bad request: malformed URL\n', head, iso);
    }
    if (pathname.includes('\0')) return text(res, 400, 'bad request\n', head, iso);
    // Dot-files and dot-directories (.git, .npmrc, ...) are never served.
    if (pathname.split('/').some((part) => part.startsWith('.')))
      return text(res, 404, `not found: ${pathname}\n`, head, iso);
    if (Object.hasOwn(redirectMap, pathname)) {
      return send(res, 302, { Location: redirectMap[pathname], 'Content-Length': 0 }, undefined, iso);
    }

    let base = rootDir;
    let rest = pathname;
    for (const [prefix, dir] of mountList) {
      if (pathname.startsWith(prefix) || `${pathname}/` === prefix) {
        base = dir;
        rest = pathname.slice(prefix.length - 1);
        break;
      }
    }
    const file = resolve(join(base, rest));
    if (file !== base && !file.startsWith(base + sep)) return text(res, 403, 'forbidden\n', head, iso);

    let info;
    let target = file;
    try {
      info = await stat(target);
      if (info.isDirectory()) {
        if (!pathname.endsWith('/')) {
          return send(res, 301, { Location: `${pathname}/`, 'Content-Length': 0 }, undefined, iso);
        }
        target = join(target, 'index.html');
        info = await stat(target);
      }
    } catch {
      return text(res, 404, `not found: ${pathname}\n`, head, iso);
    }
    if (!info.isFile()) return text(res, 404, `not found: ${pathname}\n`, head, iso);

    // no-cache + a validator: the browser keeps every file (the model's weights too) and asks each time
    // whether it changed; an unchanged file costs a 304 with no body instead of the download.
    const etag = `W/"${info.size.toString(16)}-${Math.floor(info.mtimeMs).toString(16)}"`;
    const validators = { ETag: etag, 'Last-Modified': info.mtime.toUTCString() };
    const known = req.headers['if-none-match'];
    if (known !== undefined && known.split(',').some((tag) => tag.trim() === etag || tag.trim() === '*')) {
      return send(res, 304, { ...validators }, undefined, iso);
    }
    res.writeHead(200, {
      ...iso,
      ...validators,
      'Content-Type': mimeType(target),
      'Content-Length': info.size,
      'Cache-Control': 'no-cache',
      'X-Content-Type-Options': 'nosniff',
    });
    if (head) return res.end();
    const stream = createReadStream(target);
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  };
}

/**
 * Starts a server and resolves once it listens.
 *
 * @param {object} [options] - those of {@link createHandler}, plus:
 * @param {number} [options.port] - 0 (default) picks a free port
 * @param {string} [options.host] - default 127.0.0.1
 * @returns {Promise<{ server: import('node:http').Server, port: number, host: string, url: string, close: () => Promise<void> }>}
 *   `url` is the origin with a trailing slash, e.g. `http://127.0.0.1:5173/`
 */
export function serve({ port = 0, host = '127.0.0.1', ...handlerOptions } = {}) {
  const server = createServer(createHandler(handlerOptions));
  return new Promise((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address();
      const shownHost = host.includes(':') ? `[${host}]` : host;
      resolvePromise({
        server,
        port: address.port,
        host,
        url: `http://${shownHost}:${address.port}/`,
        close: () =>
          new Promise((done) => {
            server.close(() => done());
            server.closeAllConnections?.();
          }),
      });
    });
  });
}
