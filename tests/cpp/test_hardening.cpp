// Findings of the differential fuzzer (tests/fuzz/fuzz_attention.cpp), as minimal reproducers.
// Each case says what the fast kernel does, what the double reference does, and which is right.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "test_util.hpp"

namespace {

using mha_test::kInf;

struct Pair {
  std::vector<float> fast, ref;
};

// Dense (1, S, D) x (1, T, D), one head, no mask: `kernel` and the reference (mha_test::run_both).
Pair run_one_head(const mha::KernelVariant& kernel, int32_t s, int32_t t, int32_t d, const std::vector<float>& q,
                  const std::vector<float>& k, const std::vector<float>& v, float scale) {
  mha_test::Problem p;
  p.shape = mha::AttentionShape{1, s, t, d, 1};
  p.q = q;
  p.k = k;
  p.v = v;
  p.scale = scale;
  const mha_test::Outputs o = mha_test::run_both(p, kernel);
  return Pair{o.fast, o.ref};
}

}  // namespace

// Findings of the fuzzer, fixed in the kernels: every row whose float32 result is not finite is recomputed
// by the reference (reference_attention_query), and (simd128) a scale that cannot be folded into log2
// units takes the reference path. So each case below must agree with the reference exactly, in every
// kernel variant.

// The online softmax accumulates sum_j p_j v_j before dividing by l: with |v| near FLT_MAX the float
// accumulator overflows although the exact result (a convex combination of v, here 1e38) is finite.
TEST_CASE("hardening: |v| near FLT_MAX with equal logits: the result is the mean, finite", "[hardening]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const std::vector<float> q{0.0f}, k(4, 0.0f), v(4, 1e38f);  // all logits 0: weights 1/4
  const Pair p = run_one_head(kernel, 1, 4, 1, q, k, v, 1.0f);
  CHECK(p.ref[0] == 1e38f);
  CHECK(p.fast[0] == p.ref[0]);
}

// An infinite value at a visible key whose logit is more than ~87.3 below the row max: its exact weight is
// positive but below FLT_MIN, so float32 flushes it to 0 and computes 0 * inf = NaN (as PyTorch float32
// does); the right answer is +-inf, which the reference gives.
TEST_CASE("hardening: inf in v behind a weight that underflows in float32", "[hardening]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const std::vector<float> q{1.0f}, k{100.0f, 0.0f}, v{1.0f, -kInf};  // key 1's weight is e^-100
  const Pair p = run_one_head(kernel, 1, 2, 1, q, k, v, 1.0f);
  CHECK(p.ref[0] == -kInf);
  CHECK(p.fast[0] == -kInf);
  const Pair near = run_one_head(kernel, 1, 2, 1, q, std::vector<float>{80.0f, 0.0f}, v, 1.0f);
  CHECK(near.ref[0] == -kInf);
  CHECK(near.fast[0] == -kInf);
}

// q.k itself beyond FLT_MAX: the float32 logit is +inf and a float32 softmax gives NaN (exp(inf - inf)),
// as PyTorch float32 does; the double reference still picks the winning key, and so do we.
TEST_CASE("hardening: q.k beyond FLT_MAX still selects the winning key", "[hardening]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const std::vector<float> q{1e20f}, k{1e20f, 0.0f}, v{2.0f, 3.0f};
  const Pair p = run_one_head(kernel, 1, 2, 1, q, k, v, 1.0f);
  CHECK(p.ref[0] == 2.0f);
  CHECK(p.fast[0] == 2.0f);
}

// |scale| above FLT_MAX / log2(e) ~ 2.36e38 with a tiny q.k: the logits are O(1) (here 3 and 0, weights
// 0.9526 / 0.0474). Folding log2(e) into such a scale overflows; clamping it changed the weights.
TEST_CASE("hardening: scale beyond FLT_MAX / log2(e) with a tiny q.k is applied as given", "[hardening]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const std::vector<float> q{1e-19f}, k{1e-19f, 0.0f}, v{1.0f, 0.0f};
  const Pair p = run_one_head(kernel, 1, 2, 1, q, k, v, 3e38f);  // logits: 3e38 * 1e-38 = 3, and 0
  CHECK(p.ref[0] == Approx(1.0 / (1.0 + std::exp(-3.0))).epsilon(1e-6));
  CHECK(p.fast[0] == p.ref[0]);
}

// q.k beyond FLT_MAX in float32 with a tiny scale: the exact logit is ordinary (here -6 against 3), but the
// float32 dot product is -inf, which would silently give that key weight 0 (found by the fuzzer).
TEST_CASE("hardening: a q.k that overflows float32 under a tiny scale keeps its weight", "[hardening]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const std::vector<float> q{3e38f, 3e38f}, k{1.0f, 0.0f, -1.0f, -1.0f}, v{1.0f, 0.0f, 0.0f, 1.0f};
  const Pair p = run_one_head(kernel, 1, 2, 2, q, k, v, 1e-38f);  // logits 3 and -6: weights 0.99988, 1.234e-4
  CHECK(p.ref[1] == Approx(1.0 / (1.0 + std::exp(9.0))).epsilon(1e-6));
  CHECK(p.fast[0] == p.ref[0]);
  CHECK(p.fast[1] == p.ref[1]);
}
