// Node-only loading of a Llama-convention checkpoint folder and of tiny-llama's golden data from disk
// (runner.mjs itself stays free of Node imports so that pages and Workers can use it; they call fetchLlama
// instead).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadLlama } from './runner.mjs';
import { readGolden } from './golden-check.mjs';

export const tinyLlamaDir = path.dirname(fileURLToPath(import.meta.url));

function arrayBufferOf(file) {
  const bytes = fs.readFileSync(file);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
}

/** The config.json of `dir`, parsed. */
export const readLlamaConfig = (dir = tinyLlamaDir) =>
  JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));

/** The bytes of `dir`/model.safetensors, as an ArrayBuffer. */
export const readLlamaWeights = (dir = tinyLlamaDir) => arrayBufferOf(path.join(dir, 'model.safetensors'));

/** The model in `dir` (config.json + model.safetensors), default this folder. */
export const readLlama = (dir = tinyLlamaDir) => loadLlama(readLlamaConfig(dir), readLlamaWeights(dir));

/**
 * The PyTorch golden data written by tools/make_golden.py into `dir`/golden, through golden-check.mjs's reader.
 * @returns {Promise<object>}
 */
export const readTinyLlamaGolden = (dir = tinyLlamaDir) =>
  readGolden((file) => arrayBufferOf(path.join(dir, 'golden', file)));
