// The tensor types of the public API: what q, k, v and out may be for each dtype (float32 arrays, heap
// tensors, binary16 bits), and the rope option's tables. No runtime code; types.ts builds the options and
// the instance's interface on them.
/**
 * An ES2025 `Float16Array`, on engines that have one (docs/API.md lists them; Node 20 has none). Typed
 * structurally, so the package's declarations need no ES2025 lib; at run time only a real Float16Array (or a
 * Uint16Array) passes for a binary16 tensor.
 */
export interface Float16ArrayLike extends ArrayBufferView {
  readonly length: number;
  [index: number]: number;
}

/**
 * A tensor of IEEE binary16 numbers (`dtype: 'float16'`, docs/spec.md 4.2): a Uint16Array holding the bits,
 * or a Float16Array where the engine has one.
 */
export type Float16Tensor = Uint16Array | Float16ArrayLike;

/** The element type of the q, k, v and out tensors of {@link MHA.multiHeadAttention} and {@link KVCache.attend}. */
export type TensorDType = 'float32' | 'float16';

/**
 * The q, k and v of a call whose `dtype` is `D`: binary16 tensors for `'float16'`, else float32 ones (also
 * when the dtype is only known as a TensorDType).
 */
export type TensorIn<D extends TensorDType> = [D] extends ['float16'] ? Float16Tensor : Float32Array | HeapTensor;
/** What a call whose `dtype` is `D` returns: a binary16 tensor for `'float16'`, else a Float32Array. */
export type TensorOut<D extends TensorDType> = [D] extends ['float16'] ? Float16Tensor : Float32Array;

/**
 * Rotary position embedding (docs/spec.md 4.5): the tables of {@link MHA.ropeTables} (or any the caller
 * builds), applied to q and k inside the call; v is never rotated.
 */
export interface RopeOptions {
  /**
   * cos of every (position, frequency): a Float32Array of shape (P, rotaryDim / 2), row p for position p.
   * Its length must be a positive multiple of rotaryDim / 2, and equal sin's; P = length / (rotaryDim / 2).
   */
  cos: Float32Array;
  /** sin, the same shape as cos. */
  sin: Float32Array;
  /**
   * Entries of each head vector that rotate: an even integer in [2, headDim]; default headDim. Entries past it stay.
   */
  rotaryDim?: number;
  /**
   * `false` (default): pairs (x[r], x[r + rotaryDim / 2]) rotate (Llama, GPT-NeoX, Hugging Face
   * `rotate_half`); `true`: pairs (x[2r], x[2r + 1]) (GPT-J).
   */
  interleaved?: boolean;
}

/**
 * A float32 buffer on an instance's wasm heap, from {@link MHA.allocate}. {@link MHA.multiHeadAttention}
 * takes it for q, k, v and `out` by address: no copy in or out. It belongs to the instance that made
 * it, stays allocated until {@link HeapTensor.free} or {@link MHA.dispose}, and is not garbage-collected.
 */
export interface HeapTensor {
  /** Number of float32 elements. */
  readonly length: number;
  /**
   * A live Float32Array view of the tensor's memory: reads see what the kernel wrote, writes are what
   * it will read. Any later call of the instance may grow its wasm memory, which detaches this view
   * (threaded build: the view stays on the old, shorter buffer). Re-read `data` after each call
   * instead of keeping the view; each read returns a view of the current memory.
   *
   * @throws TypeError once the tensor is freed
   */
  readonly data: Float32Array;
  /**
   * Copies `source` into the tensor, starting at element `offset`.
   *
   * @param source - Float32Array of at most `length - offset` elements
   * @param offset - first element to write, an integer in [0, length]; default 0
   * @throws TypeError when the tensor is freed or `source` is not a Float32Array
   * @throws RangeError when `offset` is not an integer in [0, length] or `source` does not fit
   */
  set(source: Float32Array, offset?: number): void;
  /**
   * A copy of the tensor's elements in a new Float32Array, independent of the wasm memory.
   *
   * @throws TypeError once the tensor is freed
   */
  toArray(): Float32Array;
  /**
   * Returns the memory to the instance's heap. Calling it again does nothing; any other use then throws a TypeError.
   */
  free(): void;
}
