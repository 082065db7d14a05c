// The PyTorch golden vectors (tests/golden) against the reference, split_heads and every kernel variant.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "golden.hpp"
#include "golden_call.hpp"
#include "mha/core/heads.hpp"
#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using mha_test::check_lse;
using mha_test::error_ratio;
using mha_test::GoldenCall;
using mha_test::GoldenCase;

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

// The v2 stateless cases (the `cache` ones belong to the KV cache's tests).
std::vector<GoldenCase> stateless_v2() {
  std::vector<GoldenCase> cases;
  for (const GoldenCase& c : mha_test::load_golden_set("v2")) {
    if (c.kind == "stateless") cases.push_back(c);
  }
  REQUIRE(cases.size() >= 16);
  return cases;
}

TEST_CASE("golden v2: the reference matches PyTorch on every stateless case (out, weights, lse)", "[golden]") {
  double worst_out = 0.0, worst_lse = 0.0, worst_weight = 0.0;
  for (const GoldenCase& c : stateless_v2()) {
    INFO("case " << c.name << ": " << c.entry.at("description").string);
    GoldenCall g(c);
    const auto& s = c.shape;
    std::vector<float> out(g.out64.size()), lse(size_t(g.lse_elements()));
    g.args.out = mha::dense_view(out.data(), s.seq_len, s.d_model);
    g.args.lse = lse.data();
    REQUIRE(mha::reference_attention(g.args) == mha::Status::kOk);
    const double ratio = error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_out = std::fmax(worst_out, ratio);
    check_lse(lse, c.read<float>("lse64", g.lse_elements()), worst_lse);

    const auto weights64 = c.read<float>("weights64", s.weights_elements());
    std::vector<float> weights(weights64.size());
    REQUIRE(mha::reference_attention_weights(g.args, weights.data()) == mha::Status::kOk);
    for (size_t i = 0; i < weights.size(); ++i) {
      INFO("weight " << i << ": " << weights[i] << " vs weights64 " << weights64[i]);
      REQUIRE(std::isnan(weights[i]) == std::isnan(weights64[i]));
      if (std::isnan(weights64[i])) continue;
      REQUIRE(std::fabs(weights[i] - weights64[i]) <= 1e-5f);
      worst_weight = std::fmax(worst_weight, std::fabs(weights[i] - weights64[i]));
    }
  }
  WARN("reference over the v2 stateless set: worst out error / tolerance "
       << worst_out << ", lse error / tolerance " << worst_lse << ", weight error " << worst_weight);
  CHECK(worst_out < 0.1);
}

TEST_CASE("golden v2: every kernel variant matches PyTorch on every stateless case (out, lse)", "[golden][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha::Workspace workspace;
  double worst_out = 0.0, worst_lse = 0.0;
  for (const GoldenCase& c : stateless_v2()) {
    INFO("case " << c.name << ": " << c.entry.at("description").string);
    GoldenCall g(c);
    std::vector<float> out(g.out64.size()), lse(size_t(g.lse_elements()), 12345.0f);
    g.args.out = mha::dense_view(out.data(), c.shape.seq_len, c.shape.d_model);
    g.args.lse = lse.data();
    REQUIRE(mha::attention(g.args, workspace, kernel) == mha::Status::kOk);
    const double ratio = error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_out = std::fmax(worst_out, ratio);
    check_lse(lse, c.read<float>("lse64", g.lse_elements()), worst_lse);
  }
  WARN("kernel " << kernel.name << " over the v2 stateless set: worst out error / tolerance " << worst_out
                 << ", lse error / tolerance " << worst_lse);
}

TEST_CASE("golden v2: the cache cases' files are readable and of the sizes their shapes say", "[golden]") {
  int cache_cases = 0;
  for (const GoldenCase& c : mha_test::load_golden_set("v2")) {
    if (c.kind != "cache") continue;
    INFO("case " << c.name);
    mha::AttentionShape s = c.shape;
    s.num_kv_heads = c.num_kv_heads;
    CHECK(c.read<float>("q", s.q_elements()).size() == size_t(s.q_elements()));
    CHECK(c.read<float>("k", s.kv_elements()).size() == size_t(s.kv_elements()));
    CHECK(c.read<float>("out64", s.q_elements()).size() == size_t(s.q_elements()));
    ++cache_cases;
  }
  CHECK(cache_cases >= 3);
}
