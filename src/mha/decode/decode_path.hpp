// How the SIMD decode kernel runs one work item (decode_kernel.hpp's DecodeBlock): the loaders it reads
// the cache through and the memory strategy of its phases, chosen by one function from the block alone
// (its dtype, its rows, its q and whether its halves hold inf/NaN), never from the thread count, so the
// bits of a result are the same for every count.
#pragma once

#include <cstdint>

#include "mha/decode/decode_kernel.hpp"

namespace mha {

// What the micro-kernels read the cache's keys and values through (decode_simd128_micro.hpp); the order
// indexes the SIMD kernel's table of paths (decode_simd128.cpp kPathRunners).
enum class DecodeLoader : int32_t {
  kFloat32,        // float32 cache, read as is
  kFloat16Scaled,  // halves widened in registers without their 2^112 (folded into q and the weights)
  kFloat16Pairs,   // the same, as even/odd halves: no interleaves, for the one-row step
  kBFloat16,       // bfloat16 widened exactly (a shuffle above zeros), for the staged tiles of 2+ rows
  kBFloat16Pairs,  // bfloat16 as even/odd elements (a mask or a shift per 4), for the one-row step
  kInt8,           // int8 K panels and V tiles widened with their scales into L1 as float32 (run_int8)
  kInt8Row,        // int8 for the one-row step: each block's scale folded into the dot products and weights
  kInt4,           // int4 panels and tiles unpacked to int8, then widened as kInt8's (run_int8 on them)
  kInteger,        // integer arithmetic on int8 or int4 (decode_integer.hpp): exact int32 dot products
  kScalarKernel,   // not the SIMD kernel: the block goes to the scalar decode kernel (cold cases)
};

struct DecodePath {
  DecodeLoader loader = DecodeLoader::kFloat32;
  // Each K panel first read once, in address order, into an L1 tile (copied, or widened from halves) that
  // every 4-row chunk then reads: a chunk of 2 or more rows sweeps a panel 2 to 4 times with a stride,
  // and straight from memory each sweep starts with a run of misses.
  bool stage_k = false;
  // The same per V tile: 3 or more float16 rows read a tile in one strided sweep per 8 lanes.
  bool stage_v = false;
  // q multiplied by 2^112 when packed (exact for |q| <= kMaxFoldableQ), so that halves widened without
  // that factor give the same products as true values: one multiply fewer per 4 halves.
  bool fold_q = false;
  // Factor of the stored weights (1, or 2^112 for values read as scaled halves, exact as fold_q).
  float p_scale = 1.0f;
  // The whole block read into L2 first (one load per 64-byte line, K and V side by side): float32 items
  // of 3 or more rows are about balanced or compute-bound, and a loop of nothing but loads keeps more
  // misses in flight than micro-kernels that need a new line every few steps (wasm has no prefetch).
  bool touch_block = false;
};

// The path of one block through a SIMD decode kernel (decode_simd128.cpp), which runs exactly it; the
// same function in each SIMD variant's namespace.
namespace simd128 {
DecodePath choose_decode_path(const DecodeBlock& block);
}  // namespace simd128
namespace relaxed {
DecodePath choose_decode_path(const DecodeBlock& block);
}  // namespace relaxed

}  // namespace mha
