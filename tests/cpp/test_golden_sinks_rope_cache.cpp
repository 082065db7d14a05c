// The v3 golden vectors (tests/golden/v3: docs/spec.md Part 4, made by tests/golden/generate.py) against
// the reference and every kernel variant. Float16 cases are read widened
// exactly to float32; their float32 result, rounded once more to binary16, is within one binary16 step
// of out64 rounded from float64.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "golden.hpp"
#include "golden_call.hpp"
#include <algorithm>
#include "mha/core/f16.hpp"
#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using mha_test::GoldenCall;
using mha_test::GoldenCase;

namespace {

std::vector<GoldenCase> stateless_v3() {
  std::vector<GoldenCase> cases;
  for (const GoldenCase& c : mha_test::load_golden_set("v3")) {
    if (c.kind == "stateless") cases.push_back(c);
  }
  REQUIRE(cases.size() >= 18);
  return cases;
}

// Steps between two binary16 codes of the same sign class (the codes of non-negative halves increase
// with the value, those of negative ones decrease): enough to say "within one step".
int32_t half_steps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t h) { return (h & 0x8000) != 0 ? -int32_t(h & 0x7fff) : int32_t(h); };
  return std::abs(ordered(a) - ordered(b));
}

void check_float16_rounding(const std::vector<float>& out, const GoldenCall& g) {
  for (size_t i = 0; i < out.size(); ++i) {
    const uint16_t mine = mha::f16::encode(out[i]), expected = g.out64_f16[i];
    INFO("element " << i << ": " << out[i] << " -> 0x" << std::hex << mine << " vs out64 0x" << expected);
    const bool nan = (expected & 0x7c00) == 0x7c00 && (expected & 0x03ff) != 0;
    REQUIRE(std::isnan(out[i]) == nan);
    if (!nan) REQUIRE(half_steps(mine, expected) <= 1);
  }
}

}  // namespace

TEST_CASE("golden v3: the reference matches PyTorch on every stateless case (out, lse, weights, stages)",
          "[golden][sinks-rope]") {
  double worst_out = 0.0, worst_lse = 0.0, worst_stage = 0.0, worst_weight = 0.0;
  for (const GoldenCase& c : stateless_v3()) {
    INFO("case " << c.name << ": " << c.entry.at("description").string);
    GoldenCall g(c);
    const mha::AttentionShape& s = g.args.shape;
    std::vector<float> out, lse(size_t(g.lse_elements()), 12345.0f);
    g.args.out = g.out_view(out);
    g.args.lse = lse.data();
    REQUIRE(mha::reference_attention(g.args) == mha::Status::kOk);
    const double ratio = mha_test::error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_out = std::fmax(worst_out, ratio);
    if (g.float16) check_float16_rounding(out, g);
    mha_test::check_lse(lse, c.read<float>("lse64", g.lse_elements()), worst_lse);

    const auto weights64 = c.read<float>("weights64", s.weights_elements());
    std::vector<float> weights(weights64.size());
    REQUIRE(mha::reference_attention_weights(g.args, weights.data(), mha::ScoreStage::kSoftmax) == mha::Status::kOk);
    for (size_t i = 0; i < weights.size(); ++i) {
      INFO("weight " << i << ": " << weights[i] << " vs weights64 " << weights64[i]);
      REQUIRE(std::isnan(weights[i]) == std::isnan(weights64[i]));
      if (std::isnan(weights64[i])) continue;
      REQUIRE(std::fabs(weights[i] - weights64[i]) <= 1e-5f);
      worst_weight = std::fmax(worst_weight, std::fabs(weights[i] - weights64[i]));
    }
    const std::pair<const char*, mha::ScoreStage> stages[] = {{"stage_scaled64", mha::ScoreStage::kScaled},
                                                              {"stage_softcapped64", mha::ScoreStage::kSoftcapped},
                                                              {"stage_biased64", mha::ScoreStage::kBiased}};
    for (const auto& [role, stage] : stages) {
      INFO("stage file " << role);
      std::vector<float> scores(size_t(s.weights_elements()));
      REQUIRE(mha::reference_attention_weights(g.args, scores.data(), stage) == mha::Status::kOk);
      mha_test::check_lse(scores, c.read<float>(role, s.weights_elements()), worst_stage);
    }
  }
  WARN("reference over the v3 stateless set: worst out error / tolerance "
       << worst_out << ", lse " << worst_lse << ", stages " << worst_stage << ", weight error " << worst_weight);
  CHECK(worst_out < 0.1);
}

TEST_CASE("golden v3: every kernel variant matches PyTorch on every stateless case (out, lse)",
          "[golden][sinks-rope][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha::Workspace workspace;
  int computed = 0;
  double worst_out = 0.0, worst_lse = 0.0;
  for (const GoldenCase& c : stateless_v3()) {
    INFO("case " << c.name);
    GoldenCall g(c);
    std::vector<float> out, lse(size_t(g.lse_elements()), 12345.0f);
    g.args.out = g.out_view(out);
    g.args.lse = lse.data();
    const mha::Status status = mha::attention(g.args, workspace, kernel);
    REQUIRE(status == mha::Status::kOk);
    const double ratio = mha_test::error_ratio(out, g);
    REQUIRE(ratio <= 1.0);
    worst_out = std::max(worst_out, ratio);
    if (g.float16) check_float16_rounding(out, g);
    mha_test::check_lse(lse, c.read<float>("lse64", g.lse_elements()), worst_lse);
    ++computed;
  }
  WARN("kernel " << kernel.name << " over the v3 stateless set: " << computed << " cases, worst out error / tolerance "
                 << worst_out << ", lse " << worst_lse);
  CHECK(computed >= 18);
}
