// Rotary position embedding tables (docs/spec.md 4.5): what `rope: { cos, sin }` takes, for the plain
// RoPE of Llama, Qwen, Mistral and GPT-NeoX. Pure JavaScript: no wasm memory is touched.
import { describe } from './describe.js';
import { checkDim, checkOptionsObject, MAX_ELEMENTS } from './validate.js';

export const ROPE_TABLES_KEYS = ['rotaryDim', 'positions', 'theta', 'scale'] as const;

/** What {@link ropeTables} takes. */
export interface RopeTablesOptions {
  /** Entries of each head vector that rotate: an even integer ≥ 2 (at most the head size where it is used). */
  rotaryDim: number;
  /** Positions covered: the tables get rows 0 … positions − 1. */
  positions: number;
  /** The base of the frequencies, a finite number > 1. Default 10000 (Llama 2); Llama 3 uses 500000. */
  theta?: number;
  /** Linear position interpolation: positions are divided by it. A finite number > 0; default 1. */
  scale?: number;
}

/** cos and sin of every (position, frequency): Float32Arrays of shape (positions, rotaryDim / 2). */
export interface RopeTables {
  cos: Float32Array;
  sin: Float32Array;
}

function positiveNumber(name: string, value: unknown, fallback: number, above: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(`${name}: expected a number, got ${describe(value)}`);
  if (!Number.isFinite(value) || !(value > above)) {
    throw new RangeError(`${name}: expected a finite number above ${above}, got ${describe(value)}`);
  }
  return value;
}

/**
 * The RoPE tables for positions [0, positions): angle(p, r) = (p / scale) · theta^(−2r / rotaryDim) for
 * r in [0, rotaryDim / 2), cos and sin computed in float64 and rounded to float32. Other scalings (NTK,
 * YaRN, Llama 3's) are tables the caller builds the same way.
 *
 * @param options rotaryDim, positions, theta (default 10000), scale (default 1).
 * @returns `{ cos, sin }`, each (positions, rotaryDim / 2).
 * @throws TypeError for a missing or non-number option; RangeError for an odd rotaryDim, a
 *   non-positive count, or a theta ≤ 1 / scale ≤ 0.
 * @example
 * const { cos, sin } = ropeTables({ rotaryDim: 64, positions: 4096, theta: 500000 });
 */
export function ropeTables(options: RopeTablesOptions): RopeTables {
  const fn = 'ropeTables';
  const o = checkOptionsObject(fn, options, ROPE_TABLES_KEYS);
  const rotaryDim = checkDim(`${fn}: rotaryDim`, o.rotaryDim);
  if (rotaryDim % 2 !== 0) throw new RangeError(`${fn}: rotaryDim: expected an even integer ≥ 2, got ${rotaryDim}`);
  const positions = checkDim(`${fn}: positions`, o.positions);
  const theta = positiveNumber(`${fn}: theta`, o.theta, 10000, 1);
  const scale = positiveNumber(`${fn}: scale`, o.scale, 1, 0);
  const half = rotaryDim / 2;
  if (positions * half >= MAX_ELEMENTS) {
    throw new RangeError(`${fn}: positions*rotaryDim/2 = ${positions * half} elements, expected fewer than 2^31`);
  }
  const inverse = Float64Array.from({ length: half }, (_, r) => theta ** ((-2 * r) / rotaryDim));
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; ++p) {
    const position = p / scale;
    for (let r = 0; r < half; ++r) {
      const angle = position * inverse[r];
      cos[p * half + r] = Math.cos(angle);
      sin[p * half + r] = Math.sin(angle);
    }
  }
  return { cos, sin };
}
