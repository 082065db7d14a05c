// The PyTorch golden vectors (tests/golden) against the reference, split_heads and every kernel variant.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "golden.hpp"
#include "mha/heads.hpp"
#include "mha/kernel.hpp"
#include "mha/reference.hpp"
#include "test_util.hpp"

using mha_test::GoldenCase;

namespace {

// The inputs of one v1 case and the call over them (out: dense (B, S, D)).
struct GoldenCall {
  std::vector<float> q, k, v, out64, out32;
  std::vector<uint8_t> mask;
  mha::AttentionArgs args;

  explicit GoldenCall(const GoldenCase& c) {
    const mha::AttentionShape& s = c.shape;
    const int64_t kv_d = int64_t{c.num_kv_heads} * s.head_dim();
    q = c.read<float>("q", s.q_elements());
    k = c.read<float>("k", int64_t{s.batch} * s.kv_seq_len * kv_d);
    v = c.read<float>("v", int64_t{s.batch} * s.kv_seq_len * kv_d);
    out64 = c.read<float>("out64", s.q_elements());
    out32 = c.read<float>("out32", s.q_elements());
    if (c.has("mask")) mask = c.read<uint8_t>("mask", s.mask_elements());
    args.shape = s;
    args.q = mha::dense_view<const float>(q.data(), s.seq_len, s.d_model);
    args.k = mha::dense_view<const float>(k.data(), s.kv_seq_len, static_cast<int32_t>(kv_d));
    args.v = mha::dense_view<const float>(v.data(), s.kv_seq_len, static_cast<int32_t>(kv_d));
    args.mask = mask.empty() ? nullptr : mask.data();
    args.scale = mha::default_scale(s.head_dim());
  }
};

// max |out - out64| / tolerance, with NaN exactly where out64 has NaN (REQUIREd).
double error_ratio(const std::vector<float>& out, const GoldenCall& g) {
  const double tolerance = mha_test::golden_tolerance(g.out64, g.out32);
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << i << ": " << out[i] << " vs out64 " << g.out64[i]);
    REQUIRE(std::isnan(out[i]) == std::isnan(g.out64[i]));
    if (!std::isnan(g.out64[i])) worst = std::fmax(worst, std::fabs(double{out[i]} - double{g.out64[i]}) / tolerance);
  }
  return worst;
}

}  // namespace

TEST_CASE("golden v1: reference, weights and split_heads match PyTorch on every case", "[golden]") {
  const auto cases = mha_test::load_golden_set("v1");
  REQUIRE(cases.size() >= 18);
  double worst_ratio = 0.0;
  for (const GoldenCase& c : cases) {
    INFO("case " << c.name);
    GoldenCall g(c);
    const auto& s = c.shape;
    std::vector<float> out(g.out64.size());
    g.args.out = mha::dense_view(out.data(), s.seq_len, s.d_model);
    REQUIRE(mha::reference_attention(g.args) == mha::Status::kOk);
    const double ratio = error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_ratio = std::fmax(worst_ratio, ratio);

    const auto weights64 = c.read<float>("weights64", s.weights_elements());
    std::vector<float> weights(weights64.size());
    REQUIRE(mha::reference_attention_weights(g.args, weights.data()) == mha::Status::kOk);
    for (size_t i = 0; i < weights.size(); ++i) {
      REQUIRE(std::isnan(weights[i]) == std::isnan(weights64[i]));
      if (!std::isnan(weights64[i])) REQUIRE(std::fabs(weights[i] - weights64[i]) <= 1e-6f);
    }

    const auto split_q = c.read<float>("split_q", s.q_elements());
    std::vector<float> split(split_q.size());
    REQUIRE(mha::split_heads(g.q.data(), s.batch, s.seq_len, s.d_model, s.num_heads, split.data()) == mha::Status::kOk);
    REQUIRE(std::memcmp(split.data(), split_q.data(), split.size() * sizeof(float)) == 0);
  }
  // The double-precision reference rounds to out64's float32 within a unit or two of the last place.
  WARN("worst |reference - out64| / tolerance over the v1 set: " << worst_ratio);
  CHECK(worst_ratio < 0.1);
}

TEST_CASE("golden v1: every kernel variant matches PyTorch within the golden tolerance", "[golden][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha::Workspace workspace;
  double worst_ratio = 0.0;
  for (const GoldenCase& c : mha_test::load_golden_set("v1")) {
    INFO("case " << c.name);
    GoldenCall g(c);
    std::vector<float> out(g.out64.size());
    g.args.out = mha::dense_view(out.data(), c.shape.seq_len, c.shape.d_model);
    REQUIRE(mha::attention(g.args, workspace, kernel) == mha::Status::kOk);
    const double ratio = error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_ratio = std::fmax(worst_ratio, ratio);
  }
  WARN("kernel " << kernel.name << ": worst |out - out64| / tolerance over the v1 set: " << worst_ratio);
}

TEST_CASE("golden v2: every case of cases.json is readable, its files of the sizes its shape says", "[golden]") {
  const auto cases = mha_test::load_golden_set("v2");
  REQUIRE(cases.size() >= 19);
  int stateless = 0;
  for (const GoldenCase& c : cases) {
    INFO("case " << c.name);
    const auto& s = c.shape;
    REQUIRE(s.num_heads % c.num_kv_heads == 0);
    const int64_t kv = int64_t{s.batch} * s.kv_seq_len * c.num_kv_heads * s.head_dim();
    CHECK(c.read<float>("q", s.q_elements()).size() == size_t(s.q_elements()));
    CHECK(c.read<float>("k", kv).size() == size_t(kv));
    CHECK(c.read<float>("v", kv).size() == size_t(kv));
    CHECK(c.read<float>("out64", s.q_elements()).size() == size_t(s.q_elements()));
    CHECK(c.read<float>("out32", s.q_elements()).size() == size_t(s.q_elements()));
    CHECK(c.read<float>("lse64", int64_t{s.batch} * s.num_heads * s.seq_len).size() > 0);
    if (c.has("mask")) CHECK(c.read<uint8_t>("mask", s.mask_elements()).size() == size_t(s.mask_elements()));
    if (c.has("bias")) {
      const mha_test::Json& shape = c.entry.at("options").at("biasShape");
      REQUIRE(shape.array.size() == 4);
      int64_t count = 1;
      for (const mha_test::Json& dim : shape.array) count *= dim.as_int();
      CHECK(c.read<float>("bias", count).size() == size_t(count));
    }
    stateless += c.kind == "stateless";
  }
  CHECK(stateless >= 16);
}
