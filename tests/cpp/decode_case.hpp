// The decode suites' harness (test_decode.cpp, test_decode_paths.cpp): a cache case (shape, dtype,
// steps, options), its data, its run through one fresh cache, and the double-precision reference's
// answer on the equivalent multi-head problem: KV heads repeated for GQA (a test construction, not a
// second reference), K/V rounded as the cache's dtype stores them, the visibility of every query (its
// position, the end of its step, causal, window) as the reference's mask, softcap and ALiBi as the
// reference's own options (query i of the sequence sits at position i).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "mha/cache/cache_codecs.hpp"
#include "mha/decode/decode.hpp"
#include "mha/core/f16.hpp"
#include "mha/kernels/kernel.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

namespace decode_case {

using mha::CacheDType;
using mha::Status;

// The suite's one tolerance check, bit comparison and special values (test_util.hpp).
using mha_test::bit_equal;
using mha_test::kInf;
using mha_test::kNaN;
using mha_test::require_close;

struct CacheCase {
  int32_t batch = 1, heads = 4, kv_heads = 4, head_dim = 8;
  CacheDType dtype = CacheDType::kFloat32;
  std::vector<int32_t> steps;  // new tokens per attend call
  int32_t capacity = 0;        // 0: exactly the total
  bool causal = true;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::vector<float> slopes;  // ALiBi, or empty
  bool empty_rows_zero = false;
  bool integer = false;  // integer arithmetic (int8 and int4)

  int32_t total() const { return std::accumulate(steps.begin(), steps.end(), 0); }
  int32_t q_width() const { return heads * head_dim; }
  int32_t kv_width() const { return kv_heads * head_dim; }
  mha::KVCacheConfig config() const {
    mha::KVCacheConfig config{batch, kv_heads, head_dim, capacity > 0 ? capacity : total(), dtype};
    config.integer = integer;
    return config;
  }
  mha::AttentionOptions options() const {
    mha::AttentionOptions o;
    o.causal = causal;
    o.window_left = window_left;
    o.window_right = window_right;
    o.softcap = softcap;
    o.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
    o.scale = mha::default_scale(head_dim);
    o.empty_rows = empty_rows_zero ? mha::EmptyRows::kZero : mha::EmptyRows::kNaN;
    return o;
  }
};

inline std::string describe(const CacheCase& c) {
  std::string steps;
  for (int32_t n : c.steps) steps += std::to_string(n) + " ";
  return "B " + std::to_string(c.batch) + " H " + std::to_string(c.heads) + " Hkv " + std::to_string(c.kv_heads) +
         " Dh " + std::to_string(c.head_dim) +
         (c.dtype == CacheDType::kFloat16    ? " f16"
          : c.dtype == CacheDType::kBFloat16 ? " bf16"
          : c.dtype == CacheDType::kInt8     ? " int8"
          : c.dtype == CacheDType::kInt4     ? " int4"
                                             : " f32") +
         " steps " + steps + (c.causal ? "causal" : "not causal") + " window " + std::to_string(c.window_left) + "," +
         std::to_string(c.window_right) + " softcap " + std::to_string(c.softcap) + (c.slopes.empty() ? "" : " alibi");
}

// The whole sequence: q (B, T, H*Dh), k and v (B, T, Hkv*Dh).
struct CacheData {
  std::vector<float> q, k, v;
};

inline CacheData case_data(const CacheCase& c, uint32_t seed, float input_scale = 1.0f) {
  const size_t rows = size_t(c.batch) * c.total();
  return CacheData{mha_test::random_tensor(rows * c.q_width(), seed, input_scale),
                   mha_test::random_tensor(rows * c.kv_width(), seed + 1, input_scale),
                   mha_test::random_tensor(rows * c.kv_width(), seed + 2, input_scale)};
}

struct Runner {
  const mha::DecodeKernel* kernel = nullptr;
  mha::ParallelAttention* parallel = nullptr;
  mha::CachePath path = mha::CachePath::kAuto;
  mha::DecodeScratch* scratch = nullptr;  // nullptr: a fresh one
  bool out_is_q = false;                  // write the result over (a copy of) q
};

// The case's steps through one fresh cache; the outputs stacked along the sequence (B, T, H*Dh), and with
// `lse` each step's lse placed in (B, H, T).
inline std::vector<float> run_cache(const CacheCase& c, const CacheData& data, const Runner& run = Runner{},
                                    std::vector<float>* lse = nullptr) {
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create(c.config(), cache) == Status::kOk);
  mha::DecodeScratch own;
  mha::DecodeScratch& scratch = run.scratch != nullptr ? *run.scratch : own;
  mha::Workspace tiled;
  const int32_t T = c.total(), D = c.q_width(), Dkv = c.kv_width();
  std::vector<float> q = data.q;
  std::vector<float> out(q.size(), -12345.0f);
  float* out_data = run.out_is_q ? q.data() : out.data();
  int32_t t0 = 0;
  if (lse != nullptr) lse->assign(size_t(c.batch) * c.heads * T, -12345.0f);
  for (int32_t n : c.steps) {
    std::vector<float> step_lse(size_t(c.batch) * c.heads * n, 777.0f);  // (B, H, n)
    mha::CacheAttendArgs args;
    args.lse = lse != nullptr ? step_lse.data() : nullptr;
    args.new_tokens = n;
    args.q = {q.data() + int64_t{t0} * D, int64_t{T} * D, D};
    args.k = {data.k.data() + int64_t{t0} * Dkv, int64_t{T} * Dkv, Dkv};
    args.v = {data.v.data() + int64_t{t0} * Dkv, int64_t{T} * Dkv, Dkv};
    args.out = {out_data + int64_t{t0} * D, int64_t{T} * D, D};
    args.options() = c.options();
    args.num_heads = c.heads;
    args.kernel = run.kernel;
    args.path = run.path;
    INFO("step at " << t0 << " of " << n << " tokens");
    REQUIRE(mha::cache_attend(*cache, args, scratch, run.parallel, tiled) == Status::kOk);
    REQUIRE(cache->max_length() == t0 + n);
    for (int32_t bh = 0; lse != nullptr && bh < c.batch * c.heads; ++bh)
      std::copy_n(step_lse.data() + int64_t{bh} * n, n, lse->data() + int64_t{bh} * T + t0);
    t0 += n;
  }
  if (run.out_is_q) out = q;
  return out;
}

// The reference's answer for the case, on the equivalent multi-head problem (see the top).
inline std::vector<float> reference_for(const CacheCase& c, const CacheData& data, std::vector<float>* lse = nullptr) {
  const int32_t T = c.total(), H = c.heads, G = c.heads / c.kv_heads, Dh = c.head_dim;
  const size_t rows = size_t(c.batch) * T;
  std::vector<float> q(rows * H * Dh, 0.0f), k(q.size(), 0.0f), v(q.size(), 0.0f), out(q.size());
  std::vector<uint8_t> mask(size_t(c.batch) * T * T);
  std::vector<int32_t> step_end(static_cast<size_t>(T));
  for (int32_t i = 0, t0 = 0; i < static_cast<int32_t>(c.steps.size()); t0 += c.steps[size_t(i)], ++i)
    for (int32_t t = t0; t < t0 + c.steps[size_t(i)]; ++t) step_end[size_t(t)] = t0 + c.steps[size_t(i)];
  auto f16_round = [&c](float x) {
    if (c.dtype == CacheDType::kFloat16) return mha::f16::decode(mha::f16::encode(x));
    return c.dtype == CacheDType::kBFloat16 ? mha::bf16::decode(mha::bf16::encode(x)) : x;
  };
  // int8 and int4 round each token's KV head row in blocks of 32 (cache_codecs.hpp).
  std::vector<float> k_stored = data.k, v_stored = data.v;
  if (c.dtype == CacheDType::kInt8 || c.dtype == CacheDType::kInt4) {
    const int64_t heads = int64_t(k_stored.size()) / Dh;
    mha::round_as_stored(c.dtype, k_stored.data(), k_stored.data(), heads, Dh);
    mha::round_as_stored(c.dtype, v_stored.data(), v_stored.data(), heads, Dh);
  }
  for (size_t r = 0; r < rows; ++r) {
    for (int32_t h = 0; h < H; ++h) {
      const size_t dst = (r * H + h) * Dh;
      const size_t kv_src = r * c.kv_width() + size_t(h / G) * Dh;
      for (int32_t d = 0; d < Dh; ++d) {
        q[dst + d] = data.q[r * c.q_width() + size_t(h) * Dh + d];
        k[dst + d] = f16_round(k_stored[kv_src + d]);
        v[dst + d] = f16_round(v_stored[kv_src + d]);
      }
    }
  }
  for (int32_t b = 0; b < c.batch; ++b)
    for (int32_t i = 0; i < T; ++i) {
      const mha::KeySpan keys = mha::visible_keys(i, step_end[size_t(i)], c.causal, c.window_left, c.window_right);
      for (int32_t j = 0; j < T; ++j) mask[(size_t(b) * T + i) * T + j] = (j >= keys.first && j <= keys.last) ? 1 : 0;
    }
  mha::AttentionArgs args;
  args.shape = mha::AttentionShape{c.batch, T, T, H * Dh, H};
  args.q = mha::dense_view<const float>(q.data(), T, H * Dh);
  args.k = mha::dense_view<const float>(k.data(), T, H * Dh);
  args.v = mha::dense_view<const float>(v.data(), T, H * Dh);
  args.out = mha::dense_view(out.data(), T, H * Dh);
  args.mask = mask.data();
  if (lse != nullptr) lse->assign(size_t(c.batch) * H * T, 0.0f);
  args.lse = lse != nullptr ? lse->data() : nullptr;  // (B, H, T)
  args.scale = mha::default_scale(Dh);
  args.softcap = c.softcap;
  args.alibi_slopes = c.slopes.empty() ? nullptr : c.slopes.data();  // query i is at position i: query_offset 0
  REQUIRE(mha::reference_attention(args) == Status::kOk);
  return out;
}

inline std::vector<const mha::DecodeKernel*> kernels() {
  // Every decode kernel variant compiled into this build (kernel_table.cpp), as the tiled ones are tested.
  return std::vector<const mha::DecodeKernel*>(mha::decode_kernel_variants().begin(),
                                               mha::decode_kernel_variants().end());
}

// Checks every kernel variant against the reference on one case.
inline void require_kernels_match_reference(const CacheCase& c, const CacheData& data, float tol = 1e-5f) {
  INFO(describe(c));
  std::vector<float> ref_lse, lse;
  const auto ref = reference_for(c, data, &ref_lse);
  for (const mha::DecodeKernel* kernel : kernels()) {
    INFO("kernel " << mha::decode_kernel_name(*kernel));
    Runner run;
    run.kernel = kernel;
    run.path = mha::CachePath::kDecodeKernel;
    require_close(ref, run_cache(c, data, run, &lse), tol);
    INFO("lse (B, H, T)");
    require_close(ref_lse, lse, tol);
  }
}

inline CacheCase make_case(int32_t batch, int32_t heads, int32_t kv_heads, int32_t head_dim, std::vector<int32_t> steps,
                           CacheDType dtype = CacheDType::kFloat32) {
  CacheCase c;
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.steps = std::move(steps);
  c.dtype = dtype;
  return c;
}

}  // namespace decode_case
