# Sourced by scripts/build.sh and scripts/test.sh: the environment every emcc/em++ call needs.
#
# Emscripten's JS optimizer runs under this Node, which does not search Debian's node modules by itself.
export NODE_PATH=/usr/share/nodejs

# `with_debian_binaryen cmd...` runs cmd without node_modules/.bin on PATH. Debian's emcc 3.1.6 runs
# binaryen's tools by their bare names, and under `npm test`/`npm start` PATH starts with
# node_modules/.bin, where the npm `binaryen` package (the relaxed builds' post-link wasm-opt, called by
# its full path) puts a wasm-opt 132. emcc then minifies the module's import names with it but cannot read
# its rename map, so the glue names imports the module does not have ("Import #0 module="a" function="a"
# ... requires a callable" at instantiation). Debian's binaryen 108 must do emcc's own passes.
with_debian_binaryen() {
  local path
  path=$(tr ':' '\n' <<<"$PATH" | grep -v '/node_modules/\.bin/*$' | paste -sd: -)
  PATH="$path" "$@"
}
