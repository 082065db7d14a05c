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

// The inputs of one stateless case (v1, or v2 with its options) and the call over them (out: dense
// (B, S, D), lse: (B, H, S)).
struct GoldenCall {
  std::vector<float> q, k, v, out64, out32, bias, slopes;
  std::vector<int32_t> kv_lengths;
  std::vector<uint8_t> mask;
  mha::AttentionArgs args;

  explicit GoldenCall(const GoldenCase& c) {
    mha::AttentionShape s = c.shape;
    s.num_kv_heads = c.num_kv_heads;
    const int64_t kv_d = s.kv_d_model();
    q = c.read<float>("q", s.q_elements());
    k = c.read<float>("k", s.kv_elements());
    v = c.read<float>("v", s.kv_elements());
    out64 = c.read<float>("out64", s.q_elements());
    out32 = c.read<float>("out32", s.q_elements());
    if (c.has("mask")) mask = c.read<uint8_t>("mask", s.mask_elements());
    args.shape = s;
    args.q = mha::dense_view<const float>(q.data(), s.seq_len, s.d_model);
    args.k = mha::dense_view<const float>(k.data(), s.kv_seq_len, static_cast<int32_t>(kv_d));
    args.v = mha::dense_view<const float>(v.data(), s.kv_seq_len, static_cast<int32_t>(kv_d));
    args.mask = mask.empty() ? nullptr : mask.data();
    args.scale = mha::default_scale(s.head_dim());
    const mha_test::Json* options = c.entry.find("options");
    if (options == nullptr) return;
    using mha_test::Json;
    auto number = [](const Json& x) { return x.type == Json::Type::kString ? INFINITY : x.number; };
    for (const auto& [name, value] : options->object) {
      if (name == "numKvHeads") continue;  // in the shape
      if (name == "causal") {
        args.causal = value.boolean;
      } else if (name == "queryOffset") {
        args.query_offset = value.as_int();
      } else if (name == "window") {
        REQUIRE(value.array.size() == 2);
        const double left = number(value.array[0]), right = number(value.array[1]);
        args.window_left = std::isinf(left) ? -1 : static_cast<int32_t>(left);
        args.window_right = std::isinf(right) ? -1 : static_cast<int32_t>(right);
      } else if (name == "kvLengths") {
        for (const Json& x : value.array) kv_lengths.push_back(x.as_int());
        args.kv_lengths = kv_lengths.data();
      } else if (name == "softcap") {
        args.softcap = static_cast<float>(value.number);
      } else if (name == "scale") {
        args.scale = static_cast<float>(value.number);
      } else if (name == "alibiSlopes") {
        for (const Json& x : value.array) slopes.push_back(static_cast<float>(x.number));
        args.alibi_slopes = slopes.data();
      } else if (name == "biasShape") {
        REQUIRE(value.array.size() == 4);
        const int32_t bias_batch = value.array[0].as_int(), bias_heads = value.array[1].as_int();
        REQUIRE(value.array[2].as_int() == s.seq_len);
        REQUIRE(value.array[3].as_int() == s.kv_seq_len);
        const int64_t plane = int64_t{s.seq_len} * s.kv_seq_len;
        bias = c.read<float>("bias", bias_batch * bias_heads * plane);
        args.bias = mha::BiasView{bias.data(), bias_batch == 1 ? 0 : bias_heads * plane, bias_heads == 1 ? 0 : plane};
      } else if (name == "emptyRows") {
        REQUIRE((value.string == "nan" || value.string == "zero"));
        args.empty_rows = value.string == "zero" ? mha::EmptyRows::kZero : mha::EmptyRows::kNaN;
      } else {
        FAIL("golden option " << name << " is not mapped onto AttentionArgs");
      }
    }
  }

  int64_t lse_elements() const { return int64_t{args.shape.batch} * args.shape.num_heads * args.shape.seq_len; }
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

// The v2 stateless cases (the `cache` ones belong to the KV cache's tests).
std::vector<GoldenCase> stateless_v2() {
  std::vector<GoldenCase> cases;
  for (const GoldenCase& c : mha_test::load_golden_set("v2")) {
    if (c.kind == "stateless") cases.push_back(c);
  }
  REQUIRE(cases.size() >= 16);
  return cases;
}

// lse against lse64: within 1e-5 * max(1, |lse64|), -inf exactly where lse64 has it, NaN likewise.
void check_lse(const std::vector<float>& lse, const std::vector<float>& lse64, double& worst) {
  REQUIRE(lse.size() == lse64.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    INFO("lse element " << i << ": " << lse[i] << " vs lse64 " << lse64[i]);
    REQUIRE(std::isnan(lse[i]) == std::isnan(lse64[i]));
    if (std::isnan(lse64[i])) continue;
    if (std::isinf(lse64[i])) {
      REQUIRE(lse[i] == lse64[i]);
      continue;
    }
    const double tolerance = 1e-5 * std::fmax(1.0, std::fabs(double{lse64[i]}));
    const double error = std::fabs(double{lse[i]} - double{lse64[i]});
    REQUIRE(error <= tolerance);
    worst = std::fmax(worst, error / tolerance);
  }
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
  WARN("reference over the v2 stateless set: worst out error / tolerance " << worst_out << ", lse error / tolerance "
                                                                            << worst_lse << ", weight error " << worst_weight);
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
