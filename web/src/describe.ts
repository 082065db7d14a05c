// How a value is shown in an error message ("got Float32Array(119)", "got HeapTensor(120, freed)"). A leaf
// module: the heap tensor class registers its own description here instead of this module importing it,
// so validation and the tensor class do not depend on each other.

/** Descriptions of the package's own objects, whose state is private to their class. */
const ownDescriptions = new WeakMap<object, () => string>();

/** Makes describe(object) return description() (heap tensors: their length, and whether they were freed). */
export function describeAs(object: object, description: () => string): void {
  ownDescriptions.set(object, description);
}

/**
 * A short description of what was given, for the "got ..." part of a message. Of an object it reads no
 * more than `constructor.name`, or a typed array's `length`.
 */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  const own = typeof value === 'object' ? ownDescriptions.get(value) : undefined;
  if (own !== undefined) return own();
  if (Array.isArray(value)) return `Array(${value.length})`;
  if (ArrayBuffer.isView(value)) {
    return `${value.constructor.name}(${(value as unknown as { length?: number }).length ?? value.byteLength})`;
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}
