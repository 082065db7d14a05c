// Types of `require('mha-wasm')` in Node, which throws (see index.cjs): mha-wasm is an ES module.
// From CommonJS, `const { createMHA } = await import('mha-wasm')` is fully typed.

/**
 * @deprecated `require('mha-wasm')` throws: mha-wasm is an ES module. Use
 * `const { createMHA } = await import('mha-wasm')`.
 */
export declare const createMHA: never;
