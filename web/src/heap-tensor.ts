// Heap tensors: malloc'd blocks of an instance's heap that multiHeadAttention takes by address. The state
// is in private fields, so neither a Proxy nor a look-alike object passes for a tensor, and the address
// and length the kernel trusts cannot be changed from outside. Also the checks of the arguments that may
// be heap tensors.
import { describe, describeAs } from './describe.js';
import type { MhaWasmModule } from './mha.js';
import { bitsView, isFloat16Array } from './float16.js';
import { copyOut } from './staging.js';
import type { Rope } from './rope-options.js';
import type { HeapTensor } from './tensor-types.js';
import { checkFloat32, checkNotDetached } from './validate.js';

/** The HeapTensor of the public API: `length` float32 elements at a 16-byte aligned address of one instance's heap. */
export class MallocedTensor implements HeapTensor {
  readonly #wasm: MhaWasmModule;
  readonly #live: Set<MallocedTensor>;
  readonly #length: number;
  /** What malloc returned, for free(). */
  readonly #block: number;
  /** Byte address of element 0 on the heap; 0 once freed. */
  #address: number;
  /** What freed the tensor, for the errors of later uses. */
  #freedBy = '';
  /** The last `data` view, replaced when the memory's buffer has changed (grown). */
  #view: Float32Array | undefined;

  constructor(wasm: MhaWasmModule, live: Set<MallocedTensor>, block: number, address: number, length: number) {
    this.#wasm = wasm;
    this.#live = live;
    this.#block = block;
    this.#address = address;
    this.#length = length;
    live.add(this);
    describeAs(this, () => `HeapTensor(${this.#length}${this.#address === 0 ? ', freed' : ''})`);
  }

  static is(value: unknown): value is MallocedTensor {
    return typeof value === 'object' && value !== null && #address in value;
  }

  static isLive(tensor: MallocedTensor): boolean {
    return tensor.#address !== 0;
  }

  /**
   * The address of `tensor` as the argument `name` of a call of the instance that owns `wasm`, after
   * checking that it is live, of that instance and of the expected length.
   */
  static addressFor(
    name: string,
    tensor: MallocedTensor,
    wasm: MhaWasmModule,
    expected: number,
    formula: () => string,
  ): number {
    tensor.#checkLive(name);
    if (tensor.#wasm !== wasm) {
      throw new TypeError(
        `${name}: the HeapTensor belongs to another mha-wasm instance (each has its own wasm memory); allocate it ` +
          `with this instance's allocate()`,
      );
    }
    if (tensor.#length !== expected) {
      throw new RangeError(
        `${name}: expected HeapTensor of length ${expected} (${formula()}), got length ${tensor.#length}`,
      );
    }
    return tensor.#address;
  }

  /** Frees the memory once; `by` is what later errors say freed it. */
  static release(tensor: MallocedTensor, by: string): void {
    if (tensor.#address === 0) return;
    tensor.#wasm._free(tensor.#block);
    tensor.#address = 0;
    tensor.#view = undefined;
    tensor.#freedBy = by;
    tensor.#live.delete(tensor);
  }

  get length(): number {
    return this.#length;
  }

  get data(): Float32Array {
    this.#checkLive('HeapTensor.data');
    return this.#currentView();
  }

  set(source: Float32Array, offset: number = 0): void {
    const fn = 'HeapTensor.set';
    this.#checkLive(fn);
    if (!(source instanceof Float32Array) || !ArrayBuffer.isView(source)) {
      throw new TypeError(`${fn}: source: expected a Float32Array, got ${describe(source)}`);
    }
    checkNotDetached(`${fn}: source`, source);
    if (typeof offset !== 'number') {
      throw new TypeError(`${fn}: offset: expected an integer in [0, ${this.#length}], got ${describe(offset)}`);
    }
    if (!Number.isInteger(offset) || offset < 0 || offset > this.#length) {
      throw new RangeError(`${fn}: offset: expected an integer in [0, ${this.#length}], got ${offset}`);
    }
    if (source.length > this.#length - offset) {
      throw new RangeError(
        `${fn}: source: expected at most ${this.#length - offset} elements (length ${this.#length} - offset ` +
          `${offset}), got length ${source.length}`,
      );
    }
    this.#currentView().set(source, offset);
  }

  toArray(): Float32Array {
    this.#checkLive('HeapTensor.toArray');
    return copyOut(this.#currentView(), 0, this.#length);
  }

  free(): void {
    MallocedTensor.release(this, 'free()');
  }

  #currentView(): Float32Array {
    const buffer = this.#wasm.HEAPF32.buffer;
    if (this.#view?.buffer !== buffer) this.#view = new Float32Array(buffer, this.#address, this.#length);
    return this.#view;
  }

  #checkLive(name: string): void {
    if (this.#address === 0) {
      throw new TypeError(`${name}: the HeapTensor was freed (by ${this.#freedBy}); allocate a new one`);
    }
  }
}

/**
 * A float32 tensor argument that may be a heap tensor of this instance (q, k, v and out of
 * multiHeadAttention and KVCache.attend): a Float32Array to stage, or the tensor's heap address (a number).
 * `option`: the name of the call's tensor dtype option, for the hint (KVCache.attend's is tensorDType).
 */
export function checkOperand(
  name: string,
  value: unknown,
  expected: number,
  formula: () => string,
  wasm: MhaWasmModule,
  option = 'dtype',
): Float32Array | number {
  if (MallocedTensor.is(value)) return MallocedTensor.addressFor(name, value, wasm, expected, formula);
  if (value instanceof MallocedTensor) {
    throw new TypeError(
      `${name}: expected a HeapTensor, got an object that only inherits from HeapTensor (e.g. a Proxy)`,
    );
  }
  const hint =
    value instanceof Uint16Array || isFloat16Array(value)
      ? ` (binary16 tensors need the option ${option}: 'float16')`
      : '';
  return checkFloat32(name, value, expected, formula, ' or a HeapTensor of that length', hint);
}

/**
 * A binary16 tensor argument (dtype 'float16', docs/spec.md 4.2): a Uint16Array of the bits or a
 * Float16Array, returned as a Uint16Array view of its bits (no copy). A HeapTensor holds float32 only.
 * `option`: the name of the call's tensor dtype option (KVCache.attend's is tensorDType).
 */
export function checkHalf(
  name: string,
  value: unknown,
  expected: number,
  formula: () => string,
  option = 'dtype',
): Uint16Array {
  const arrays = 'Uint16Array (binary16 bits) or Float16Array';
  const what = `${arrays} of length ${expected} (${formula()}) for ${option} 'float16'`;
  if (MallocedTensor.is(value)) {
    throw new TypeError(
      `${name}: expected ${what}, got a HeapTensor (heap tensors hold float32: use ${option} 'float32' with them)`,
    );
  }
  if (!(value instanceof Uint16Array) && !isFloat16Array(value))
    throw new TypeError(`${name}: expected ${what}, got ${describe(value)}`);
  if (!ArrayBuffer.isView(value)) {
    throw new TypeError(
      `${name}: expected a Uint16Array or Float16Array, got an object that only inherits from one (e.g. a Proxy)`,
    );
  }
  checkNotDetached(name, value);
  if (value.length !== expected) throw new RangeError(`${name}: expected ${what}, got length ${value.length}`);
  return bitsView(value);
}

/** A Float32Array argument of a function that takes no heap tensor (attentionWeights, splitHeads, mergeHeads). */
export function checkArrayOnly(name: string, value: unknown, expected: number, formula: () => string): Float32Array {
  const hint = MallocedTensor.is(value) ? ' (only multiHeadAttention takes a HeapTensor; pass its data)' : '';
  return checkFloat32(name, value, expected, formula, '', hint);
}

const describeKind = (value: unknown): string => (ArrayBuffer.isView(value) ? value.constructor.name : 'Float32Array');

/**
 * Option getters and boolean[] mask entries are user code that runs after q, k (and v) were checked;
 * it could free one of those tensors or detach one of those arrays. Checked again once no user code can
 * run any more, before the heap is touched.
 */
export function checkStillUsable(
  name: string,
  value: unknown,
  operand: Float32Array | Uint16Array | number | undefined,
  length: number,
): void {
  if (
    typeof operand === 'number'
      ? !MallocedTensor.isLive(value as MallocedTensor)
      : operand !== undefined && operand.length !== length
  ) {
    const what =
      typeof operand === 'number'
        ? 'the HeapTensor was freed'
        : `the ${describeKind(value)}'s ArrayBuffer was detached`;
    throw new TypeError(`${name}: ${what} during validation, by an option getter or a boolean[] mask entry`);
  }
}

/** The rope tables were checked before option getters ran: checked again once none can (see checkStillUsable). */
export function checkRopeStillUsable(fn: string, rope: Rope): void {
  checkStillUsable(`${fn}: rope: cos`, rope.cos, rope.cos, rope.positions * rope.half);
  checkStillUsable(`${fn}: rope: sin`, rope.sin, rope.sin, rope.positions * rope.half);
}
