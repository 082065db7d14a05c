// Helpers shared by the Catch2 tests, one per job: the seeded PRNG (random_tensor), the problem with
// its buffers (Problem, make_problem), running a kernel variant and the reference on it (run_both), and
// the comparisons (bit_equal, require_close). Tests that run a kernel run it for every variant of the
// build: `const mha::KernelVariant& kernel = EACH_KERNEL();` makes a Catch2 generator over them.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "mha/core/shape.hpp"

namespace mha_test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Standard-normal floats times `scale` from a seeded generator (tests print the seed with INFO).
inline std::vector<float> random_tensor(size_t count, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator) * scale;
  return values;
}

// The kernel variants of this build, for GENERATE.
inline std::vector<const mha::KernelVariant*> kernel_list() {
  const mha::KernelList list = mha::kernel_variants();
  return std::vector<const mha::KernelVariant*>(list.begin(), list.end());
}

// One section per kernel variant of the build (Catch2 reruns the test case for each); its name is INFO.
#define EACH_KERNEL()                                                   \
  ([](const mha::KernelVariant* kernel_) -> const mha::KernelVariant& { \
    return *kernel_;                                                    \
  }(GENERATE(Catch::Generators::from_range(::mha_test::kernel_list()))))

enum class MaskKind { kNone, kRandom, kKeyPadding, kFullyMaskedRows };

// The options of docs/spec.md Part 2 for a Problem (the shape's num_kv_heads is the GQA one).
struct Options {
  int32_t query_offset = 0;
  std::vector<int32_t> kv_lengths;  // (B), or empty
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::vector<float> alibi_slopes;         // (H), or empty
  std::vector<float> bias;                 // [bias_batch, bias_heads, S, T], or empty
  int32_t bias_batch = 0, bias_heads = 0;  // 1 or B, 1 or H
  mha::EmptyRows empty_rows = mha::EmptyRows::kNaN;
  bool lse = false;  // ask for the (B, H, S) lse
};

// One attention problem with its own buffers. q is (B, S, D), k/v (B, T, Hkv*Dh), in buffers that may be
// larger: misaligned by `offset` floats, rows `row_pad` floats apart beyond their width (e.g. a slice of
// a packed (B, S, 3D) qkv projection); with both 0 (the default) they are dense. Padding floats hold
// NaN, so a read outside the described tensors shows up in the output.
struct Problem {
  mha::AttentionShape shape;
  bool causal = false;
  float scale = 0.0f;
  int32_t offset = 0;
  int32_t row_pad = 0;
  std::vector<float> q, k, v;  // the buffers, offset and padding included
  std::vector<float> out;      // dense (B, S, D): where args() writes
  std::vector<float> lse;      // (B, H, S): where args() writes it, with options.lse
  std::vector<uint8_t> mask;   // (B, S, T), or empty
  Options options;

  Problem() = default;
  // Dense standard-normal q, k, v (times input_scale) from one seed.
  Problem(mha::AttentionShape s, uint64_t seed, float input_scale = 1.0f)
      : shape(s), scale(mha::default_scale(s.head_dim())) {
    q = random_tensor(size_t(s.q_elements()), seed, input_scale);
    k = random_tensor(size_t(s.kv_elements()), seed + 1, input_scale);
    v = random_tensor(size_t(s.kv_elements()), seed + 2, input_scale);
    out.assign(size_t(s.q_elements()), -12345.0f);
  }

  int64_t row_stride() const { return shape.d_model + row_pad; }
  int64_t kv_row_stride() const { return shape.kv_d_model() + row_pad; }
  int64_t q_batch_stride() const { return shape.seq_len * row_stride(); }
  int64_t kv_batch_stride() const { return shape.kv_seq_len * kv_row_stride(); }
  size_t q_index(int b, int i, int c) const { return size_t(offset + b * q_batch_stride() + i * row_stride() + c); }
  size_t kv_index(int b, int j, int c) const {
    return size_t(offset + b * kv_batch_stride() + j * kv_row_stride() + c);
  }
  float& q_at(int b, int i, int c) { return q[q_index(b, i, c)]; }
  float& k_at(int b, int j, int c) { return k[kv_index(b, j, c)]; }
  float& v_at(int b, int j, int c) { return v[kv_index(b, j, c)]; }
  float q_at(int b, int i, int c) const { return q[q_index(b, i, c)]; }
  float k_at(int b, int j, int c) const { return k[kv_index(b, j, c)]; }
  float v_at(int b, int j, int c) const { return v[kv_index(b, j, c)]; }
  uint8_t& mask_at(int b, int i, int j) { return mask[(size_t(b) * shape.seq_len + i) * shape.kv_seq_len + j]; }

  // The call over these buffers, writing the dense (B, S, D) `result` (resized, filled with -12345) and,
  // with options.lse, the (B, H, S) `lse_result` (filled with 12345).
  mha::AttentionArgs args(std::vector<float>& result, std::vector<float>* lse_result = nullptr) const {
    mha::AttentionArgs a;
    a.shape = shape;
    a.q = {q.data() + offset, q_batch_stride(), row_stride()};
    a.k = {k.data() + offset, kv_batch_stride(), kv_row_stride()};
    a.v = {v.data() + offset, kv_batch_stride(), kv_row_stride()};
    result.assign(size_t(shape.q_elements()), -12345.0f);
    a.out = mha::dense_view(result.data(), shape.seq_len, shape.d_model);
    a.mask = mask.empty() ? nullptr : mask.data();
    a.causal = causal;
    a.scale = scale;
    const Options& o = options;
    a.query_offset = o.query_offset;
    a.kv_lengths = o.kv_lengths.empty() ? nullptr : o.kv_lengths.data();
    a.window_left = o.window_left;
    a.window_right = o.window_right;
    a.softcap = o.softcap;
    a.alibi_slopes = o.alibi_slopes.empty() ? nullptr : o.alibi_slopes.data();
    if (!o.bias.empty()) {
      const int64_t plane = int64_t{shape.seq_len} * shape.kv_seq_len;  // (S, T)
      a.bias = mha::BiasView{o.bias.data(), o.bias_batch == 1 ? 0 : int64_t{o.bias_heads} * plane,
                             o.bias_heads == 1 ? 0 : plane};
    }
    a.empty_rows = o.empty_rows;
    if (o.lse && lse_result != nullptr) {
      lse_result->assign(size_t(shape.batch) * shape.num_heads * shape.seq_len, 12345.0f);
      a.lse = lse_result->data();
    }
    return a;
  }
  mha::AttentionArgs args() { return args(out, &lse); }

  // A random [bias_batch, bias_heads, S, T] bias (standard normal times `scale`, a fraction `hidden` of it
  // -inf) as options.bias.
  void random_bias(int32_t bias_batch, int32_t bias_heads, uint64_t seed, float bias_scale = 1.0f,
                   double hidden = 0.0) {
    options.bias_batch = bias_batch;
    options.bias_heads = bias_heads;
    options.bias = random_tensor(size_t(bias_batch) * bias_heads * shape.seq_len * shape.kv_seq_len, seed, bias_scale);
    std::mt19937_64 rng(seed + 7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (float& x : options.bias)
      if (u(rng) < hidden) x = -kInf;
  }
};

// A problem with random q, k (times input_scale), v, and a mask of the given kind.
inline Problem make_problem(mha::AttentionShape shape, uint64_t seed, float input_scale = 1.0f,
                            MaskKind mask_kind = MaskKind::kNone, bool causal = false, int32_t offset = 0,
                            int32_t row_pad = 0) {
  Problem p;
  p.shape = shape;
  p.causal = causal;
  p.scale = mha::default_scale(shape.head_dim());
  p.offset = offset;
  p.row_pad = row_pad;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.q.assign(size_t(offset + shape.batch * p.q_batch_stride()), kNaN);
  p.k.assign(size_t(offset + shape.batch * p.kv_batch_stride()), kNaN);
  p.v.assign(p.k.size(), kNaN);
  const int64_t kv_d = shape.kv_d_model();
  for (int b = 0; b < shape.batch; ++b) {
    for (int i = 0; i < shape.seq_len; ++i)
      for (int c = 0; c < shape.d_model; ++c) p.q_at(b, i, c) = normal(rng) * input_scale;
    for (int j = 0; j < shape.kv_seq_len; ++j)
      for (int c = 0; c < kv_d; ++c) p.k_at(b, j, c) = normal(rng) * input_scale;
    for (int j = 0; j < shape.kv_seq_len; ++j)
      for (int c = 0; c < kv_d; ++c) p.v_at(b, j, c) = normal(rng);
  }
  if (mask_kind != MaskKind::kNone) {
    p.mask.assign(size_t(shape.mask_elements()), 1);
    std::uniform_int_distribution<int> coin(0, 2);
    for (int b = 0; b < shape.batch; ++b) {
      const int valid = std::uniform_int_distribution<int>(1, shape.kv_seq_len)(rng);
      for (int i = 0; i < shape.seq_len; ++i) {
        const bool row_off = mask_kind == MaskKind::kFullyMaskedRows && coin(rng) == 0;
        for (int j = 0; j < shape.kv_seq_len; ++j) {
          uint8_t& m = p.mask_at(b, i, j);
          if (mask_kind == MaskKind::kRandom || mask_kind == MaskKind::kFullyMaskedRows) m = coin(rng) != 0;
          if (mask_kind == MaskKind::kKeyPadding) m = j < valid;
          if (row_off) m = 0;
        }
      }
    }
  }
  return p;
}

struct Outputs {
  std::vector<float> ref, fast;          // (B, S, D)
  std::vector<float> ref_lse, fast_lse;  // (B, H, S), with options.lse
};

// The reference and `kernel` on the same problem (both must accept it).
inline Outputs run_both(const Problem& p, const mha::KernelVariant& kernel) {
  Outputs o;
  REQUIRE(mha::reference_attention(p.args(o.ref, &o.ref_lse)) == mha::Status::kOk);
  mha::Workspace workspace;
  REQUIRE(mha::attention(p.args(o.fast, &o.fast_lse), workspace, kernel) == mha::Status::kOk);
  return o;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The first index where |got - want| > atol + rtol |want| (infinities and NaN must match exactly), or -1.
// One check per tensor: a REQUIRE per element costs more than the attention it checks.
inline int64_t first_not_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i])) {
      if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) return int64_t(i);
      continue;
    }
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) return int64_t(i);
  }
  return -1;
}

constexpr float kTol = 1e-5f;

// |fast - ref| <= tol * max(1, max|ref|) elementwise; NaN exactly where the reference has NaN.
inline void require_close(const std::vector<float>& ref, const std::vector<float>& fast, float tol = kTol) {
  REQUIRE(ref.size() == fast.size());
  float ref_max = 1.0f;
  for (float x : ref)
    if (std::isfinite(x)) ref_max = std::max(ref_max, std::fabs(x));
  size_t bad = 0, first_bad = 0;
  float worst = 0.0f;
  for (size_t n = 0; n < ref.size(); ++n) {
    const bool nan_ref = std::isnan(ref[n]), nan_fast = std::isnan(fast[n]);
    float err = 0.0f;
    if (nan_ref != nan_fast) {
      err = kInf;
    } else if (!nan_ref) {
      err = ref[n] == fast[n] ? 0.0f : std::fabs(ref[n] - fast[n]);
    }
    if (!(err <= tol * ref_max)) {
      if (bad++ == 0) first_bad = n;
    }
    if (std::isfinite(err)) worst = std::max(worst, err);
  }
  INFO("worst finite error " << worst << ", allowed " << tol * ref_max << ", bad elements " << bad << ", first at "
                             << first_bad << " (ref " << (bad ? ref[first_bad] : 0.0f) << ", fast "
                             << (bad ? fast[first_bad] : 0.0f) << ")");
  REQUIRE(bad == 0);
}

// lse: |fast - ref| <= tol * max(1, |ref|) per element, -inf and NaN exactly where the reference has them.
inline void require_close_lse(const std::vector<float>& ref, const std::vector<float>& fast, float tol = kTol) {
  REQUIRE(ref.size() == fast.size());
  for (size_t n = 0; n < ref.size(); ++n) {
    INFO("lse element " << n << ": reference " << ref[n] << ", kernel " << fast[n]);
    REQUIRE(std::isnan(ref[n]) == std::isnan(fast[n]));
    if (std::isnan(ref[n])) continue;
    if (std::isinf(ref[n])) {
      REQUIRE(fast[n] == ref[n]);
      continue;
    }
    REQUIRE(std::fabs(double(fast[n]) - ref[n]) <= tol * std::max(1.0, std::fabs(double(ref[n]))));
  }
}

}  // namespace mha_test
