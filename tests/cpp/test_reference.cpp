// The scalar reference against hand-computed cases and the properties the spec promises.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstring>
#include <string>
#include <limits>
#include <numeric>
#include <vector>

#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using mha::AttentionShape;
using mha::Status;
using mha_test::Problem;

namespace {

// Textbook single-head attention (S, Dh) x (T, Dh) -> (S, Dh) in double: full score matrix, softmax,
// matmul. Summation orders match the reference on purpose, so agreement is expected to be exact.
std::vector<float> single_head_attention(const std::vector<float>& q, const std::vector<float>& k,
                                         const std::vector<float>& v, int S, int T, int Dh, float scale) {
  std::vector<float> out(static_cast<size_t>(S) * Dh);
  for (int i = 0; i < S; ++i) {
    std::vector<double> p(T);
    double row_max = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < T; ++j) {
      double dot = 0.0;
      for (int d = 0; d < Dh; ++d) dot += double{q[i * Dh + d]} * double{k[j * Dh + d]};
      p[j] = dot * double{scale};
      row_max = std::fmax(row_max, p[j]);
    }
    double sum = 0.0;
    for (int j = 0; j < T; ++j) sum += (p[j] = std::exp(p[j] - row_max));
    for (int d = 0; d < Dh; ++d) {
      double acc = 0.0;
      for (int j = 0; j < T; ++j) acc += p[j] * double{v[j * Dh + d]};
      out[i * Dh + d] = static_cast<float>(acc / sum);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("reference: a 2-key case computed by hand", "[reference]") {
  Problem p(AttentionShape{1, 1, 2, 2, 1}, 1);
  p.q = {1.0f, 0.0f};
  p.k = {1.0f, 0.0f, 0.0f, 1.0f};
  p.v = {1.0f, 2.0f, 3.0f, 4.0f};
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  // scores = [1/sqrt(2), 0]; w1 = 1 / (1 + e^(1/sqrt(2))); out = v0 + w1 * (v1 - v0)
  const double w1 = 1.0 / (1.0 + std::exp(1.0 / std::sqrt(2.0)));
  CHECK(p.out[0] == Approx(1.0 + 2.0 * w1).epsilon(1e-7));
  CHECK(p.out[1] == Approx(2.0 + 2.0 * w1).epsilon(1e-7));
}

TEST_CASE("reference: one key gives exactly v", "[reference]") {
  Problem p(AttentionShape{2, 3, 1, 6, 2}, 2);
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int d = 0; d < 6; ++d) REQUIRE(p.out[(b * 3 + i) * 6 + d] == p.v[b * 6 + d]);
}

TEST_CASE("reference: causal row 0 sees only key 0; causal is upper-left aligned when S != T", "[reference]") {
  Problem p(AttentionShape{1, 3, 5, 4, 1}, 3);
  p.causal = true;
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int d = 0; d < 4; ++d) CHECK(p.out[d] == p.v[d]);  // query 0: only key 0
  // Query 2 sees keys 0..2 only: the same as attention over the first 3 keys without causal.
  Problem first3(AttentionShape{1, 3, 3, 4, 1}, 3);
  first3.q = p.q;
  first3.k.assign(p.k.begin(), p.k.begin() + 12);
  first3.v.assign(p.v.begin(), p.v.begin() + 12);
  REQUIRE(mha::reference_attention(first3.args()) == Status::kOk);
  for (int d = 0; d < 4; ++d) CHECK(p.out[8 + d] == first3.out[8 + d]);
}

TEST_CASE("reference: a fully masked row is NaN, its neighbours are not", "[reference][mask]") {
  Problem p(AttentionShape{1, 2, 3, 4, 2}, 4);
  p.mask = {0, 0, 0, 1, 0, 1};
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int d = 0; d < 4; ++d) CHECK(std::isnan(p.out[d]));
  for (int d = 0; d < 4; ++d) CHECK(std::isfinite(p.out[4 + d]));
  std::vector<float> weights(2 * 2 * 3);
  REQUIRE(mha::reference_attention_weights(p.args(), weights.data()) == Status::kOk);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 3; ++j) CHECK(std::isnan(weights[(h * 2 + 0) * 3 + j]));
    CHECK(weights[(h * 2 + 1) * 3 + 1] == 0.0f);  // masked key of row 1
  }
}

TEST_CASE("reference: mask AND causal both have to allow a key", "[reference][mask]") {
  Problem p(AttentionShape{1, 2, 2, 2, 1}, 5);
  p.causal = true;
  p.mask = {0, 1, 1, 1};  // row 0 allows only key 1, which causal hides: nothing left
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  CHECK(std::isnan(p.out[0]));
  CHECK(std::isfinite(p.out[2]));
}

TEST_CASE("reference: logits whose exp overflows still give finite, correct outputs", "[reference][numerics]") {
  Problem p(AttentionShape{1, 1, 2, 1, 1}, 6);
  p.q = {100.0f};
  p.k = {100.0f, 99.0f};  // scores 10000 and 9900: exp overflows unless the max is subtracted
  p.v = {1.0f, 2.0f};
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  CHECK(p.out[0] == 1.0f);  // the second weight is e^-100
  Problem big(AttentionShape{2, 8, 8, 16, 4}, 7, 1000.0f);
  REQUIRE(mha::reference_attention(big.args()) == Status::kOk);
  for (float value : big.out) REQUIRE(std::isfinite(value));
}

TEST_CASE("reference: all-equal logits give the mean of V", "[reference][numerics]") {
  Problem p(AttentionShape{1, 4, 6, 8, 2}, 8);
  std::fill(p.k.begin(), p.k.end(), 0.5f);  // every key identical: uniform weights
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int d = 0; d < 8; ++d) {
    double mean = 0.0;
    for (int j = 0; j < 6; ++j) mean += p.v[j * 8 + d];
    mean /= 6.0;
    for (int i = 0; i < 4; ++i) REQUIRE(p.out[i * 8 + d] == Approx(mean).margin(1e-6));
  }
}

TEST_CASE("reference: numHeads = 1 is exactly single-head attention (spec step 6)", "[reference][properties]") {
  for (auto [S, T, D] : std::vector<std::array<int, 3>>{{5, 5, 12}, {7, 19, 12}, {1, 1, 3}, {33, 20, 17}}) {
    INFO("S=" << S << " T=" << T << " D=" << D);
    Problem p(AttentionShape{1, S, T, D, 1}, 9);
    REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
    const auto expected = single_head_attention(p.q, p.k, p.v, S, T, D, mha::default_scale(D));
    REQUIRE(std::memcmp(expected.data(), p.out.data(), expected.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("reference: heads are an extra batch axis (each head equals 1-head attention on its slice)",
          "[reference][properties]") {
  const int B = 2, S = 6, T = 9, D = 20, H = 4, Dh = 5;
  Problem p(AttentionShape{B, S, T, D, H}, 10);
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      std::vector<float> qh(S * Dh), kh(T * Dh), vh(T * Dh);
      for (int i = 0; i < S; ++i) std::copy_n(&p.q[(b * S + i) * D + h * Dh], Dh, &qh[i * Dh]);
      for (int j = 0; j < T; ++j) std::copy_n(&p.k[(b * T + j) * D + h * Dh], Dh, &kh[j * Dh]);
      for (int j = 0; j < T; ++j) std::copy_n(&p.v[(b * T + j) * D + h * Dh], Dh, &vh[j * Dh]);
      const auto expected = single_head_attention(qh, kh, vh, S, T, Dh, mha::default_scale(Dh));
      for (int i = 0; i < S; ++i)
        for (int e = 0; e < Dh; ++e) REQUIRE(p.out[(b * S + i) * D + h * Dh + e] == expected[i * Dh + e]);
    }
}

TEST_CASE("reference: permuting K and V rows together leaves the output unchanged", "[reference][properties]") {
  Problem p(AttentionShape{1, 5, 11, 12, 3}, 11);
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  Problem permuted = p;
  std::vector<int> order(11);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  std::swap(order[2], order[7]);
  for (int j = 0; j < 11; ++j) {
    std::copy_n(&p.k[order[j] * 12], 12, &permuted.k[j * 12]);
    std::copy_n(&p.v[order[j] * 12], 12, &permuted.v[j * 12]);
  }
  REQUIRE(mha::reference_attention(permuted.args()) == Status::kOk);
  for (size_t i = 0; i < p.out.size(); ++i) REQUIRE(permuted.out[i] == Approx(p.out[i]).margin(1e-6));
}

TEST_CASE("reference: output rows lie within the column range of V", "[reference][properties]") {
  Problem p(AttentionShape{2, 9, 13, 8, 2}, 12);
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  for (int b = 0; b < 2; ++b)
    for (int d = 0; d < 8; ++d) {
      float lo = INFINITY, hi = -INFINITY;
      for (int j = 0; j < 13; ++j) {
        lo = std::min(lo, p.v[(b * 13 + j) * 8 + d]);
        hi = std::max(hi, p.v[(b * 13 + j) * 8 + d]);
      }
      for (int i = 0; i < 9; ++i) {
        const float value = p.out[(b * 9 + i) * 8 + d];
        REQUIRE(value >= lo);
        REQUIRE(value <= hi);
      }
    }
}

TEST_CASE("reference: a non-finite V behind the mask is never read", "[reference][mask]") {
  Problem p(AttentionShape{1, 1, 3, 2, 1}, 13);
  p.mask = {1, 0, 1};
  p.v[2] = std::numeric_limits<float>::infinity();
  p.v[3] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  CHECK(std::isfinite(p.out[0]));
  CHECK(std::isfinite(p.out[1]));
}
