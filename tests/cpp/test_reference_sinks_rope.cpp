// The reference's v0.3 options (docs/spec.md Part 4): value heads of their own size, score stages, sinks
// and rotary embedding, against hand-computed cases and the properties the spec promises. The last case
// pins the statuses; the kernels compute the same options (test_kernels_sinks_rope.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"
#include "strided_call.hpp"

using mha::AttentionShape;
using mha::ScoreStage;
using mha::Status;
using mha_test::random_tensor;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Dense buffers of one call with Dv of its own: q (B, S, H*Dh), k (B, T, Hkv*Dh), v (B, T, Hkv*Dv),
// out (B, S, H*Dv), lse (B, H, S).
struct V3Problem {
  AttentionShape shape;
  std::vector<float> q, k, v, out, lse, sinks, cos, sin;
  mha::AttentionArgs base;

  V3Problem(AttentionShape s, uint64_t seed) : shape(s) {
    q = random_tensor(size_t(s.q_elements()), seed);
    k = random_tensor(size_t(s.kv_elements()), seed + 1);
    v = random_tensor(size_t(int64_t{s.batch} * s.kv_seq_len * s.v_d_model()), seed + 2);
    base.shape = s;
    base.scale = mha::default_scale(s.head_dim());
  }

  // The call, writing out and lse afresh (filled with sentinels first; kept as they are with fresh false).
  mha::AttentionArgs args(bool fresh = true) {
    mha::AttentionArgs a = base;
    a.q = mha::dense_view<const float>(q.data(), shape.seq_len, shape.d_model);
    a.k = mha::TensorView<const float>{k.data(), int64_t{shape.kv_seq_len} * shape.kv_d_model(), shape.kv_d_model()};
    a.v = mha::TensorView<const float>{v.data(), int64_t{shape.kv_seq_len} * shape.v_d_model(), shape.v_d_model()};
    if (fresh || out.empty()) out.assign(size_t(int64_t{shape.batch} * shape.seq_len * shape.out_d_model()), -12345.0f);
    a.out = mha::TensorView<float>{out.data(), int64_t{shape.seq_len} * shape.out_d_model(), shape.out_d_model()};
    if (fresh || lse.empty()) lse.assign(size_t(shape.batch) * shape.num_heads * shape.seq_len, 12345.0f);
    a.lse = lse.data();
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    if (!cos.empty()) {
      a.rope.cos = cos.data();
      a.rope.sin = sin.data();
    }
    return a;
  }

  // Rope tables of `positions` rows as ropeTables computes them (strided_call.hpp).
  void set_rope(int32_t rotary_dim, int32_t positions, bool interleaved, double theta = 10000.0) {
    mha_test::rope_tables(rotary_dim, positions, theta, cos, sin);
    base.rope.positions = positions;
    base.rope.rotary_dim = rotary_dim;
    base.rope.interleaved = interleaved;
  }
};

std::vector<float> weights_at(V3Problem& p, ScoreStage stage) {
  std::vector<float> w(size_t(p.shape.weights_elements()), -7.0f);
  REQUIRE(mha::reference_attention_weights(p.args(false), w.data(), stage) == Status::kOk);
  return w;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
    if (std::signbit(a[i]) != std::signbit(b[i]) && a[i] != 0.0f) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("reference, sinks and rope: Dv < Dh gives the first Dv columns of V padded to Dh, bit for bit",
          "[reference][sinks-rope]") {
  const AttentionShape wide{2, 5, 7, 4 * 12, 4, 2};  // B, S, T, D, H, Hkv; Dh 12
  AttentionShape narrow = wide;
  narrow.v_head_dim = 8;
  V3Problem padded(wide, 11), cut(narrow, 11);
  padded.base.causal = cut.base.causal = true;
  padded.base.query_offset = cut.base.query_offset = 2;
  // v of `cut` is (B, T, Hkv*8); `padded` holds the same 8 columns per head and zeros after them.
  for (int32_t row = 0; row < wide.batch * wide.kv_seq_len; ++row) {
    for (int32_t g = 0; g < 2; ++g) {
      for (int32_t d = 0; d < 12; ++d) {
        padded.v[size_t(row) * 24 + g * 12 + d] = d < 8 ? cut.v[size_t(row) * 16 + g * 8 + d] : 0.0f;
      }
    }
  }
  REQUIRE(mha::reference_attention(padded.args()) == Status::kOk);
  REQUIRE(mha::reference_attention(cut.args()) == Status::kOk);
  for (int32_t row = 0; row < wide.batch * wide.seq_len; ++row) {
    for (int32_t h = 0; h < 4; ++h) {
      for (int32_t d = 0; d < 8; ++d) {
        REQUIRE(cut.out[size_t(row) * 32 + h * 8 + d] == padded.out[size_t(row) * 48 + h * 12 + d]);
      }
    }
  }
  CHECK(same_bits(cut.lse, padded.lse));
  CHECK(same_bits(weights_at(cut, ScoreStage::kSoftmax), weights_at(padded, ScoreStage::kSoftmax)));
}

TEST_CASE("reference, sinks and rope: Dv > Dh reads Dv values per key", "[reference][sinks-rope]") {
  AttentionShape s{1, 3, 4, 2 * 4, 2, 1};
  s.v_head_dim = 6;
  V3Problem p(s, 5);
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  const std::vector<float> w = weights_at(p, ScoreStage::kSoftmax);
  for (int32_t h = 0; h < 2; ++h) {
    for (int32_t i = 0; i < 3; ++i) {
      for (int32_t d = 0; d < 6; ++d) {
        double expected = 0.0;
        for (int32_t j = 0; j < 4; ++j) expected += double{w[size_t((h * 3 + i) * 4 + j)]} * p.v[size_t(j * 6 + d)];
        CHECK(p.out[size_t(i * 12 + h * 6 + d)] == Approx(expected).margin(1e-6));
      }
    }
  }
}

TEST_CASE("reference, sinks and rope: stage 'softmax' is the weights bit for bit; the other stages are the scores",
          "[reference][sinks-rope]") {
  V3Problem p(AttentionShape{2, 4, 6, 3 * 8, 3, 3}, 21);
  p.base.causal = true;
  p.base.softcap = 2.5f;
  std::vector<float> slopes{0.5f, 0.25f, 0.125f};
  p.base.alibi_slopes = slopes.data();
  std::vector<float> w(size_t(p.shape.weights_elements()));
  REQUIRE(mha::reference_attention_weights(p.args(), w.data()) == Status::kOk);
  CHECK(same_bits(weights_at(p, ScoreStage::kSoftmax), w));

  const std::vector<float> scaled = weights_at(p, ScoreStage::kScaled);
  const std::vector<float> capped = weights_at(p, ScoreStage::kSoftcapped);
  const std::vector<float> biased = weights_at(p, ScoreStage::kBiased);
  for (int32_t b = 0; b < 2; ++b) {
    for (int32_t h = 0; h < 3; ++h) {
      for (int32_t i = 0; i < 4; ++i) {
        for (int32_t j = 0; j < 6; ++j) {
          double dot = 0.0;
          for (int32_t d = 0; d < 8; ++d)
            dot += double{p.q[size_t((b * 4 + i) * 24 + h * 8 + d)]} * p.k[size_t((b * 6 + j) * 24 + h * 8 + d)];
          const double s = dot * p.base.scale;
          const double c = 2.5 * std::tanh(s / 2.5);
          const size_t at = size_t(((b * 3 + h) * 4 + i) * 6 + j);
          CHECK(scaled[at] == static_cast<float>(s));  // every key, hidden or not
          CHECK(capped[at] == static_cast<float>(c));
          if (j > i) {
            CHECK(biased[at] == -kInf);  // causal hides it
          } else {
            CHECK(biased[at] == static_cast<float>(c - slopes[size_t(h)] * std::fabs(double(i - j))));
          }
        }
      }
    }
  }
  std::vector<float> sink(size_t(p.shape.weights_elements()));
  CHECK(mha::reference_attention_weights(p.args(), sink.data(), static_cast<ScoreStage>(4)) == Status::kBadStage);
}

TEST_CASE("reference, sinks and rope: a sink joins the denominator; a very negative sink changes nothing",
          "[reference][sinks-rope]") {
  V3Problem with(AttentionShape{1, 3, 5, 2 * 4, 2, 2}, 31), without(AttentionShape{1, 3, 5, 2 * 4, 2, 2}, 31);
  with.sinks = {-1e30f, -1e30f};
  REQUIRE(mha::reference_attention(with.args()) == Status::kOk);
  REQUIRE(mha::reference_attention(without.args()) == Status::kOk);
  CHECK(same_bits(with.out, without.out));
  CHECK(same_bits(with.lse, without.lse));

  // A 1-key row with sink 0 and score s: w = e^s / (1 + e^s), out = w * v, lse = ln(1 + e^s).
  V3Problem one(AttentionShape{1, 1, 1, 2, 1, 1}, 1);
  one.q = {1.0f, 2.0f};
  one.k = {0.5f, 0.25f};
  one.v = {3.0f, -1.0f};
  one.sinks = {0.0f};
  one.base.scale = 1.0f;
  REQUIRE(mha::reference_attention(one.args()) == Status::kOk);
  const double s = 1.0, w = std::exp(s) / (1.0 + std::exp(s));
  CHECK(one.out[0] == Approx(3.0 * w).epsilon(1e-7));
  CHECK(one.out[1] == Approx(-w).epsilon(1e-7));
  CHECK(one.lse[0] == Approx(std::log1p(std::exp(s))).epsilon(1e-7));
  CHECK(weights_at(one, ScoreStage::kSoftmax)[0] == Approx(w).epsilon(1e-7));
}

TEST_CASE("reference, sinks and rope: with sinks, weights sum to 1 minus the sink's share, and empty rows give 0",
          "[reference][sinks-rope]") {
  V3Problem p(AttentionShape{2, 4, 6, 2 * 8, 2, 1}, 41);
  p.sinks = {0.7f, -2.0f};
  std::vector<int32_t> kv_lengths{6, 0};  // batch item 1 sees no key
  p.base.kv_lengths = kv_lengths.data();
  p.base.empty_rows = mha::EmptyRows::kNaN;  // the sink overrides it
  REQUIRE(mha::reference_attention(p.args()) == Status::kOk);
  const std::vector<float> w = weights_at(p, ScoreStage::kSoftmax);
  for (int32_t h = 0; h < 2; ++h) {
    for (int32_t i = 0; i < 4; ++i) {
      double sum = 0.0;
      for (int32_t j = 0; j < 6; ++j) sum += w[size_t(((0 * 2 + h) * 4 + i) * 6 + j)];
      const double lse = p.lse[size_t((0 * 2 + h) * 4 + i)];
      CHECK(sum + std::exp(double{p.sinks[size_t(h)]} - lse) == Approx(1.0).epsilon(1e-6));
      CHECK(sum < 1.0);
      // The empty row of batch item 1: out 0, weights 0, lse = the sink.
      for (int32_t d = 0; d < 8; ++d) CHECK(p.out[size_t((1 * 4 + i) * 16 + h * 8 + d)] == 0.0f);
      for (int32_t j = 0; j < 6; ++j) CHECK(w[size_t(((1 * 2 + h) * 4 + i) * 6 + j)] == 0.0f);
      CHECK(p.lse[size_t((1 * 2 + h) * 4 + i)] == p.sinks[size_t(h)]);
    }
  }
}

TEST_CASE("reference, sinks and rope: rope with zero angles is no rope, bit for bit", "[reference][sinks-rope]") {
  V3Problem with(AttentionShape{2, 3, 5, 2 * 8, 2, 1}, 51), without(AttentionShape{2, 3, 5, 2 * 8, 2, 1}, 51);
  with.base.query_offset = without.base.query_offset = 2;
  with.set_rope(6, 5, false);
  for (float& c : with.cos) c = 1.0f;
  for (float& s : with.sin) s = 0.0f;
  REQUIRE(mha::reference_attention(with.args()) == Status::kOk);
  REQUIRE(mha::reference_attention(without.args()) == Status::kOk);
  CHECK(same_bits(with.out, without.out));
  CHECK(same_bits(with.lse, without.lse));
}

TEST_CASE("reference, sinks and rope: rope rotates pairs as the spec says (rotate_half and interleaved)",
          "[reference][sinks-rope]") {
  for (const bool interleaved : {false, true}) {
    INFO("interleaved " << interleaved);
    // One head, Dh 4, rotary_dim 4: q at position 1 against one key at position 0 (unrotated) and check
    // the 'scaled' score against the rotated q computed by hand.
    V3Problem p(AttentionShape{1, 1, 2, 4, 1, 1}, 61);
    p.q = {1.0f, 2.0f, 3.0f, 4.0f};
    p.k = {0.5f, -1.0f, 0.25f, 2.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    p.base.scale = 1.0f;
    p.base.query_offset = 1;
    p.set_rope(4, 2, interleaved);
    const float c0 = p.cos[2], c1 = p.cos[3], s0 = p.sin[2], s1 = p.sin[3];  // row 1
    double rq[4];
    if (interleaved) {
      rq[0] = 1.0 * c0 - 2.0 * s0, rq[1] = 2.0 * c0 + 1.0 * s0, rq[2] = 3.0 * c1 - 4.0 * s1,
      rq[3] = 4.0 * c1 + 3.0 * s1;
    } else {
      rq[0] = 1.0 * c0 - 3.0 * s0, rq[1] = 2.0 * c1 - 4.0 * s1, rq[2] = 3.0 * c0 + 1.0 * s0,
      rq[3] = 4.0 * c1 + 2.0 * s1;
    }
    const std::vector<float> scaled = weights_at(p, ScoreStage::kScaled);
    CHECK(scaled[0] == Approx(rq[0] * 0.5 - rq[1] + rq[2] * 0.25 + rq[3] * 2.0).epsilon(1e-7));
  }
}

TEST_CASE("reference, sinks and rope: with rope, scores depend on relative positions only", "[reference][sinks-rope]") {
  // Rotating q at p and k at j gives the score of q at p + d against k at j + d: move every key one row
  // down and the query offset one up, and the score of each (query, key) pair stays (up to rounding).
  const AttentionShape s{1, 2, 4, 8, 1, 1};
  V3Problem a(s, 71);
  AttentionShape shifted_shape = s;
  shifted_shape.kv_seq_len = 5;
  V3Problem b(shifted_shape, 72);
  b.q = a.q;
  for (int32_t j = 0; j < 4; ++j) {
    for (int32_t d = 0; d < 8; ++d) b.k[size_t((j + 1) * 8 + d)] = a.k[size_t(j * 8 + d)];
  }
  a.base.query_offset = 1;
  b.base.query_offset = 2;
  a.set_rope(8, 8, false);
  b.set_rope(8, 8, false);
  const std::vector<float> sa = weights_at(a, ScoreStage::kScaled), sb = weights_at(b, ScoreStage::kScaled);
  for (int32_t i = 0; i < 2; ++i) {
    for (int32_t j = 0; j < 4; ++j) CHECK(sb[size_t(i * 5 + j + 1)] == Approx(sa[size_t(i * 4 + j)]).margin(1e-5));
  }
}

TEST_CASE("reference, sinks and rope: bad options are statuses; the kernels refuse what they do not compute yet",
          "[reference][sinks-rope]") {
  V3Problem p(AttentionShape{1, 3, 4, 2 * 4, 2, 1}, 81);
  p.sinks = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(mha::reference_attention(p.args()) == Status::kBadSinks);
  p.sinks = {0.0f, kInf};
  CHECK(mha::reference_attention(p.args()) == Status::kBadSinks);
  p.sinks.clear();

  p.set_rope(3, 8, false);
  CHECK(mha::reference_attention(p.args()) == Status::kBadRotaryDim);  // odd
  p.set_rope(6, 8, false);
  CHECK(mha::reference_attention(p.args()) == Status::kBadRotaryDim);  // > Dh
  p.set_rope(4, 3, false);
  CHECK(mha::reference_attention(p.args()) == Status::kRopePosition);  // T = 4 keys, 3 rows
  p.set_rope(4, 4, false);
  p.base.query_offset = 2;
  CHECK(mha::reference_attention(p.args()) == Status::kRopePosition);  // query positions 2..4
  p.base.query_offset = 1;
  CHECK(mha::reference_attention(p.args()) == Status::kOk);
  mha::AttentionArgs half = p.args();
  half.rope.sin = nullptr;
  CHECK(mha::reference_attention(half) == Status::kBadRotaryDim);

  mha::Workspace workspace;
  CHECK(mha::attention(p.args(), workspace) == Status::kOk);  // every kernel computes rope, sinks and Dv
  p.cos.clear();
  p.sin.clear();
  p.base.rope = mha::RotaryTables{};
  CHECK(mha::attention(p.args(), workspace) == Status::kOk);
  p.sinks = {1.0f, 2.0f};
  CHECK(mha::attention(p.args(), workspace) == Status::kOk);
  p.sinks.clear();

  AttentionShape dv = p.shape;
  dv.v_head_dim = 3;
  V3Problem q(dv, 82);
  CHECK(mha::reference_attention(q.args()) == Status::kOk);
  CHECK(mha::attention(q.args(), workspace) == Status::kOk);
  q.base.shape.v_head_dim = -1;
  CHECK(mha::reference_attention(q.args()) == Status::kBadVHeadDim);
}
