// Lists of numbers given as options or arguments, each read once into a typed array of its own (so no
// user code runs while a call is staged). Two readers, because the two families' accepted inputs and
// messages differ and the tests pin both: the options of docs/spec.md Part 2 (kvLengths, alibiSlopes,
// sinks) take exactly one typed array type or a number[] and speak of "length" and "at index"; the cache's
// per-sequence counts (newTokens, truncate's array) take any integer typed array (BigInt64Array too) and
// speak of "entries" and "entry b", each bounded on its own (entry b of truncate by lengths[b]).
import { describe } from './describe.js';
import { checkNotDetached } from './validate.js';

/**
 * A number[] or the typed array `Typed` of exactly `length` entries, each accepted by `entry` (which
 * returns what is wrong with it, or undefined), copied into a new `Typed` array. `what` is the expected
 * value, `why` how the length is made (both for messages).
 */
export function checkNumberList<A extends Int32Array | Float32Array>(
  name: string,
  value: unknown,
  Typed: { new (length: number): A; name: string },
  length: number,
  why: string,
  what: string,
  entry: (x: number) => string | undefined,
): A {
  const expected = `${Typed.name} or number[] of ${length} ${what} (${why})`;
  if (!(value instanceof Typed) && !Array.isArray(value))
    throw new TypeError(`${name}: expected ${expected}, got ${describe(value)}`);
  if (value instanceof Typed) {
    if (!ArrayBuffer.isView(value)) {
      const article = /^[AEIOU]/.test(Typed.name) ? 'an' : 'a';
      throw new TypeError(
        `${name}: expected ${article} ${Typed.name}, got an object that only inherits from ${Typed.name} ` +
          '(e.g. a Proxy)',
      );
    }
    checkNotDetached(name, value);
  }
  const list = value as ArrayLike<unknown>;
  if (list.length !== length) throw new RangeError(`${name}: expected ${expected}, got length ${list.length}`);
  const copy = new Typed(length);
  for (let i = 0; i < length; i++) {
    const x: unknown = list[i];
    if (typeof x !== 'number') throw new TypeError(`${name}: expected ${what}, got ${describe(x)} at index ${i}`);
    const problem = entry(x);
    if (problem !== undefined) throw new RangeError(`${name}: expected ${what}, got ${x} at index ${i}${problem}`);
    copy[i] = x;
  }
  return copy;
}

/** `[a, b, c]` for a message: the first 8 entries of a length list. */
export function listOf(values: ArrayLike<number>): string {
  const shown = Array.from({ length: Math.min(values.length, 8) }, (_, i) => values[i]);
  return `[${shown.join(', ')}${values.length > 8 ? ', ...' : ''}]`;
}

/**
 * An array (or Int32Array / other typed array) of `count` integers, entry b in [0, bound(b)], as an
 * Int32Array: newTokens of attend and the array form of truncate.
 */
export function checkIntegerList(
  name: string,
  value: unknown,
  count: number,
  bound: (b: number) => number,
  expected: string,
): Int32Array {
  const isList = Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
  if (!isList) throw new TypeError(`${name}: expected ${expected}, got ${describe(value)}`);
  const list = value as ArrayLike<unknown>;
  if (list.length !== count) throw new RangeError(`${name}: expected ${expected}, got ${list.length} entries`);
  const out = new Int32Array(count);
  for (let b = 0; b < count; b++) {
    const entry = list[b];
    if (typeof entry !== 'number' && typeof entry !== 'bigint') {
      throw new TypeError(`${name}: entry ${b}: expected an integer in [0, ${bound(b)}], got ${describe(entry)}`);
    }
    const x = Number(entry);
    if (!Number.isInteger(x) || x < 0 || x > bound(b))
      throw new RangeError(`${name}: entry ${b}: expected an integer in [0, ${bound(b)}], got ${x}`);
    out[b] = x;
  }
  return out;
}
