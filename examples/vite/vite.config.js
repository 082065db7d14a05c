// Plain object (no import of 'vite'), so the file also works when vite is installed elsewhere.
export default {
  // Vite's dev server pre-bundles dependencies into .vite/deps, which moves the package's
  // `new URL('./mha.wasm', import.meta.url)` away from mha.wasm. Excluding it keeps the URL right.
  // `vite build` needs nothing.
  optimizeDeps: { exclude: ['mha-wasm'] },
  build: { target: 'es2022' },
};
