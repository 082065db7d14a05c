// Types of the Emscripten glue (dist/mha.js, generated from src/bindings.cpp). Private to the package.
export interface MhaWasmModule {
  _malloc(bytes: number): number;
  _free(address: number): void;
  HEAPU8: Uint8Array;
  HEAPF32: Float32Array;
  attention(q: number, k: number, v: number, out: number, mask: number, batch: number, seqLen: number,
    kvSeqLen: number, dModel: number, numHeads: number, causal: boolean, scale: number): number;
  attentionReference(q: number, k: number, v: number, out: number, mask: number, batch: number, seqLen: number,
    kvSeqLen: number, dModel: number, numHeads: number, causal: boolean, scale: number): number;
  attentionWeights(q: number, k: number, weights: number, mask: number, batch: number, seqLen: number,
    kvSeqLen: number, dModel: number, numHeads: number, causal: boolean, scale: number): number;
  splitHeads(x: number, xh: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
  mergeHeads(xh: number, x: number, batch: number, seqLen: number, dModel: number, numHeads: number): number;
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
