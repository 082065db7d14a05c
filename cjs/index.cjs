// mha-wasm is an ES module (it locates its .wasm with import.meta.url). This file is what
// `require('mha-wasm')` resolves to: it fails at once with a message that says what to do instead.
'use strict';

const error = new Error(
  'mha-wasm is an ES module and cannot be loaded with require(). From CommonJS, use a dynamic import:\n' +
    "  const { createMHA } = await import('mha-wasm');\n" +
    'or write your script as an ES module (.mjs, or "type": "module" in package.json) and\n' +
    "  import { createMHA } from 'mha-wasm';",
);
error.code = 'ERR_REQUIRE_ESM';
throw error;
