// Node-only loading of tiny-gpt and its golden data from disk (runner.mjs itself stays free of Node
// imports so that pages and Workers can use it; they call fetchTinyGPT instead).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTinyGPT } from './runner.mjs';
import { readGolden } from './golden-check.mjs';

export const tinyGptDir = path.dirname(fileURLToPath(import.meta.url));

function arrayBufferOf(file) {
  const bytes = fs.readFileSync(file);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
}

/** The model in `dir` (config.json + model.safetensors), default this folder. */
export function readTinyGPT(dir = tinyGptDir) {
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  return loadTinyGPT(config, arrayBufferOf(path.join(dir, 'model.safetensors')));
}

/**
 * The PyTorch golden data written by tools/make_golden.py into `dir`/golden, through golden-check.mjs's reader:
 * index.json, with its logits files as Float32Arrays (`index.logits.values`, `index.logitsF16KV.values`).
 * @returns {Promise<object>}
 */
export function readTinyGPTGolden(dir = tinyGptDir) {
  return readGolden((file) => arrayBufferOf(path.join(dir, 'golden', file)));
}

/** heads.json of `dir` (tools/analyze_heads.py): per-head previous-token and induction scores and their inputs. */
export function readTinyGPTHeads(dir = tinyGptDir) {
  return JSON.parse(fs.readFileSync(path.join(dir, 'heads.json'), 'utf8'));
}
