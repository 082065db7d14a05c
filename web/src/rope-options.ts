// The rope option (docs/spec.md 4.5) of multiHeadAttention, attentionWeights and KVCache.attend: the
// tables checked once, here, and the rows a call needs checked against them by its caller.
import { describe } from './describe.js';
import { checkNotDetached, checkOptionsObject } from './validate.js';

export const ROPE_KEYS = ['cos', 'sin', 'rotaryDim', 'interleaved'] as const;

/** Checked rope tables (docs/spec.md 4.5): `positions` = P rows of `half` = rotaryDim / 2 entries each. */
export interface Rope {
  cos: Float32Array;
  sin: Float32Array;
  rotaryDim: number;
  interleaved: boolean;
  positions: number;
  half: number;
}

/**
 * rope: `{ cos, sin, rotaryDim = headDim, interleaved = false }`, the tables Float32Arrays of one length,
 * a multiple of rotaryDim / 2. The positions the call needs are checked by its caller (ropeRows).
 */
export function checkRope(fn: string, value: unknown, headDim: number): Rope | undefined {
  if (value === undefined) return undefined;
  const name = `${fn}: rope`;
  const o = checkOptionsObject(name, value, ROPE_KEYS);
  const { cos, sin, rotaryDim: dimIn, interleaved: interleavedIn } = o;
  const expectedDim = `an even integer in [2, headDim = ${headDim}]`;
  let rotaryDim = headDim;
  if (dimIn !== undefined) {
    if (typeof dimIn !== 'number')
      throw new TypeError(`${name}: rotaryDim: expected ${expectedDim}, got ${describe(dimIn)}`);
    rotaryDim = dimIn;
  }
  if (!Number.isInteger(rotaryDim) || rotaryDim < 2 || rotaryDim > headDim || rotaryDim % 2 !== 0) {
    throw new RangeError(
      `${name}: rotaryDim: expected ${expectedDim}, got ` +
        `${rotaryDim}${dimIn === undefined ? ' (the default, headDim)' : ''}`,
    );
  }
  if (interleavedIn !== undefined && typeof interleavedIn !== 'boolean') {
    throw new TypeError(`${name}: interleaved: expected a boolean, got ${describe(interleavedIn)}`);
  }
  const half = rotaryDim / 2;
  const tables: Float32Array[] = [];
  for (const [key, table] of [
    ['cos', cos],
    ['sin', sin],
  ] as const) {
    const expected = `a Float32Array of (positions, rotaryDim / 2 = ${half}) entries, e.g. from ropeTables()`;
    if (!(table instanceof Float32Array))
      throw new TypeError(`${name}: ${key}: expected ${expected}, got ${describe(table)}`);
    if (!ArrayBuffer.isView(table)) {
      throw new TypeError(
        `${name}: ${key}: expected a Float32Array, got an object that only inherits from Float32Array (e.g. a Proxy)`,
      );
    }
    checkNotDetached(`${name}: ${key}`, table);
    if (table.length === 0 || table.length % half !== 0) {
      throw new RangeError(
        `${name}: ${key}: expected a length that is a positive multiple of rotaryDim / 2 = ${half}, got length ` +
          `${table.length}`,
      );
    }
    tables.push(table);
  }
  const [cosTable, sinTable] = tables as [Float32Array, Float32Array];
  if (cosTable.length !== sinTable.length) {
    throw new RangeError(
      `${name}: sin: expected the length of cos (${cosTable.length}), got length ${sinTable.length}`,
    );
  }
  return {
    cos: cosTable,
    sin: sinTable,
    rotaryDim,
    interleaved: interleavedIn === true,
    positions: cosTable.length / half,
    half,
  };
}

/** Throws the RangeError of a call whose positions reach `needed` - 1 when the rope tables have fewer rows. */
export function checkRopeRows(
  fn: string,
  rope: Rope,
  needed: number,
  why: () => string,
  nothing = 'nothing was computed',
): void {
  if (needed > rope.positions) {
    throw new RangeError(
      `${fn}: rope: position ${needed - 1} (${why()}) is past the tables' ${rope.positions} rows ` +
        `(cos.length / (rotaryDim / 2) = ${rope.cos.length} / ${rope.half}); ${nothing}`,
    );
  }
}
