// Types of the Emscripten glue (dist/mha.js, generated from src/bindings.cpp). Private to the package.
export interface MhaWasmModule {
  _malloc(bytes: number): number;
  _free(address: number): void;
  // Direct C exports of src/bindings.cpp (addresses and dims in, mha::Status out; causal is 0/1).
  _mha_attention(q: number, k: number, v: number, out: number, mask: number, batch: number, seqLen: number,
    kvSeqLen: number, dModel: number, numHeads: number, causal: number, scale: number): number;
  _mha_attention_weights(q: number, k: number, weights: number, mask: number, batch: number, seqLen: number,
    kvSeqLen: number, dModel: number, numHeads: number, causal: number, scale: number): number;
  _mha_split_heads(x: number, xh: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
  _mha_merge_heads(xh: number, x: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
  HEAPU8: Uint8Array;
  HEAPF32: Float32Array;
  defaultScale(headDim: number): number;
  releaseScratch(): void;
  heapBytesInUse(): number;
  version(): string;
  simd(): boolean;
}

export interface MhaModuleOptions {
  wasmBinary?: ArrayBuffer | Uint8Array;
  instantiateWasm?(
    imports: WebAssembly.Imports,
    done: (instance: WebAssembly.Instance, module: WebAssembly.Module) => void,
  ): object;
}

declare const createMhaModule: (options?: MhaModuleOptions) => Promise<MhaWasmModule>;
export default createMhaModule;
