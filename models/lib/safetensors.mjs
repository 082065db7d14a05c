// Reading safetensors checkpoints in plain JS, for every model runner of models/ (tiny-gpt, the Llama
// runner). ESM whose only import is the project's binary16 codec (scripts/lib/float16.mjs, import-free),
// for Node, pages and Workers.
//
// The format: a u64 little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}}
// (offsets relative to the end of the header), then the raw little-endian data.
import { float16Value } from '../../scripts/lib/float16.mjs';

const bfloat16Scratch = new Float32Array(1);
const bfloat16ScratchBits = new Uint32Array(bfloat16Scratch.buffer);

/** bfloat16 bits -> the float32 value they encode: they are the upper half of that float32 (exact). */
export function bfloat16BitsToFloat32(bits) {
  bfloat16ScratchBits[0] = (bits & 0xffff) << 16;
  return bfloat16Scratch[0];
}

/** Bytes per value and the decoder of each dtype this reader widens to float32. */
const DTYPES = {
  F32: { bytes: 4, read: (view, i) => view.getFloat32(4 * i, true) },
  F16: { bytes: 2, read: (view, i) => float16Value(view.getUint16(2 * i, true)) },
  BF16: { bytes: 2, read: (view, i) => bfloat16BitsToFloat32(view.getUint16(2 * i, true)) },
};

/**
 * Parses a safetensors file. F32, F16 and BF16 tensors become Float32Arrays (exactly: each of those
 * values is a float32).
 * @param {ArrayBuffer} buffer
 * @returns {Map<string, {shape: number[], dtype: string, data: Float32Array}>}
 */
export function parseSafetensors(buffer) {
  if (!(buffer instanceof ArrayBuffer))
    throw new TypeError(
      `parseSafetensors: buffer: expected an ArrayBuffer, got ${buffer?.constructor?.name ?? typeof buffer}`,
    );
  if (buffer.byteLength < 8)
    throw new RangeError(`parseSafetensors: buffer: expected at least 8 bytes, got ${buffer.byteLength}`);
  const view = new DataView(buffer);
  const headerLength = Number(view.getBigUint64(0, true));
  if (8 + headerLength > buffer.byteLength) {
    throw new RangeError(
      `parseSafetensors: header length ${headerLength} runs past the ${buffer.byteLength}-byte file`,
    );
  }
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, headerLength)));
  const dataStart = 8 + headerLength;
  const tensors = new Map();
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const type = DTYPES[info.dtype];
    if (!type) throw new TypeError(`parseSafetensors: ${name}: expected dtype F32, F16 or BF16, got ${info.dtype}`);
    const [start, end] = info.data_offsets;
    const count = info.shape.reduce((a, b) => a * b, 1);
    if (end - start !== type.bytes * count) {
      throw new RangeError(
        `parseSafetensors: ${name}: expected ${type.bytes * count} bytes for ${count} ${info.dtype} values, got ${end - start}`,
      );
    }
    if (dataStart + end > buffer.byteLength)
      throw new RangeError(
        `parseSafetensors: ${name}: data ends at byte ${dataStart + end}, past the ${buffer.byteLength}-byte file`,
      );
    const src = new DataView(buffer, dataStart + start, end - start);
    const data = new Float32Array(count);
    for (let i = 0; i < count; i++) data[i] = type.read(src, i);
    tensors.set(name, { shape: info.shape, dtype: info.dtype, data });
  }
  return tensors;
}

/**
 * The data of tensor `name`, checked against the expected shape.
 * @param {Map<string, {shape: number[], data: Float32Array}>} tensors from parseSafetensors
 * @param {string} name
 * @param {number[]} shape
 * @param {string} who the model, for the error message
 */
export function takeTensor(tensors, name, shape, who) {
  const t = tensors.get(name);
  if (!t) throw new RangeError(`${who}: model.safetensors has no tensor ${name}`);
  if (t.shape.length !== shape.length || t.shape.some((n, i) => n !== shape[i])) {
    throw new RangeError(`${who}: ${name}: expected shape [${shape}], got [${t.shape}]`);
  }
  return t.data;
}
