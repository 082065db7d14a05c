// One stateless golden case as a core call (GoldenCall: its inputs, its expected outputs and the
// AttentionArgs over them, every option of cases.json mapped onto the core's names), and the golden
// comparisons (error_ratio for out, check_lse). Shared by the v1/v2 tests (test_golden.cpp) and the v3
// ones (test_golden_sinks_rope_cache.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "golden.hpp"
#include "mha/core/f16.hpp"
#include "mha/core/shape.hpp"

namespace mha_test {

struct GoldenCall {
  std::vector<float> q, k, v, out64, out32, bias, slopes, sinks, rope_cos, rope_sin;
  std::vector<int32_t> kv_lengths;
  std::vector<uint8_t> mask;
  bool float16 = false;             // dtype 'float16': q, k, v and out64 are binary16 files
  std::vector<uint16_t> out64_f16;  // float16 cases: out64 rounded once to binary16 (out64 is then out64f32)
  mha::AttentionArgs args;          // out: dense (B, S, H*Dv), lse: (B, H, S) are the test's to set

  explicit GoldenCall(const GoldenCase& c) {
    mha::AttentionShape s = c.shape;
    s.num_kv_heads = c.num_kv_heads;
    const Json* options = c.entry.find("options");
    if (options != nullptr) {
      if (const Json* dv = options->find("vHeadDim")) s.v_head_dim = dv->as_int();
      if (const Json* dtype = options->find("dtype")) {
        REQUIRE((dtype->string == "float16" || dtype->string == "float32"));
        float16 = dtype->string == "float16";
      }
    }
    q = tensor(c, "q", s.q_elements());
    k = tensor(c, "k", s.kv_elements());
    v = tensor(c, "v", int64_t{s.batch} * s.kv_seq_len * s.v_d_model());
    if (float16) {
      out64_f16 = c.read<uint16_t>("out64", out_elements(s));
      out64 = c.read<float>("out64f32", out_elements(s));
    } else {
      out64 = c.read<float>("out64", out_elements(s));
    }
    out32 = c.read<float>("out32", out_elements(s));
    if (c.has("mask")) mask = c.read<uint8_t>("mask", s.mask_elements());
    args.shape = s;
    args.q = mha::dense_view<const float>(q.data(), s.seq_len, s.d_model);
    args.k = mha::TensorView<const float>{k.data(), s.kv_seq_len * s.kv_d_model(), s.kv_d_model()};
    args.v = mha::TensorView<const float>{v.data(), s.kv_seq_len * s.v_d_model(), s.v_d_model()};
    args.mask = mask.empty() ? nullptr : mask.data();
    args.scale = mha::default_scale(s.head_dim());
    if (options != nullptr) {
      for (const auto& [name, value] : options->object) map_option(c, name, value);
    }
  }

  static int64_t out_elements(const mha::AttentionShape& s) { return int64_t{s.batch} * s.seq_len * s.out_d_model(); }
  int64_t out_elements() const { return out_elements(args.shape); }
  int64_t lse_elements() const { return int64_t{args.shape.batch} * args.shape.num_heads * args.shape.seq_len; }

  // A dense (B, S, H*Dv) view of `out` (resized) for args.out.
  mha::TensorView<float> out_view(std::vector<float>& out) const {
    out.assign(size_t(out_elements()), -12345.0f);
    const int64_t row = args.shape.out_d_model();
    return mha::TensorView<float>{out.data(), args.shape.seq_len * row, row};
  }

 private:
  // A float32 tensor of `role`: as stored, or widened exactly from the binary16 file of a float16 case.
  std::vector<float> tensor(const GoldenCase& c, const std::string& role, int64_t count) const {
    if (!float16) return c.read<float>(role, count);
    const std::vector<uint16_t> halves = c.read<uint16_t>(role, count);
    std::vector<float> values(halves.size());
    for (size_t i = 0; i < halves.size(); ++i) values[i] = mha::f16::decode(halves[i]);
    return values;
  }

  void map_option(const GoldenCase& c, const std::string& name, const Json& value) {
    const mha::AttentionShape& s = args.shape;
    auto number = [](const Json& x) { return x.type == Json::Type::kString ? INFINITY : x.number; };
    if (name == "numKvHeads" || name == "vHeadDim" || name == "dtype") return;  // in the shape / the tensors
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
    } else if (name == "sinks") {
      for (const Json& x : value.array) sinks.push_back(static_cast<float>(x.number));
      REQUIRE(int32_t(sinks.size()) == s.num_heads);
      args.sinks = sinks.data();
    } else if (name == "rope") {
      map_rope(c, value);
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

  // rope: {rotaryDim, interleaved, positions, cos: role, sin: role} (theta and scale made the tables).
  void map_rope(const GoldenCase& c, const Json& rope) {
    args.rope.rotary_dim = rope.at("rotaryDim").as_int();
    args.rope.interleaved = rope.at("interleaved").boolean;
    args.rope.positions = rope.at("positions").as_int();
    const int64_t count = int64_t{args.rope.positions} * (args.rope.rotary_dim / 2);
    rope_cos = c.read<float>(rope.at("cos").string, count);
    rope_sin = c.read<float>(rope.at("sin").string, count);
    args.rope.cos = rope_cos.data();
    args.rope.sin = rope_sin.data();
  }
};

// max |out - out64| / tolerance, with NaN exactly where out64 has NaN (REQUIREd).
inline double error_ratio(const std::vector<float>& out, const GoldenCall& g) {
  const double tolerance = golden_tolerance(g.out64, g.out32);
  double worst = 0.0;
  REQUIRE(out.size() == g.out64.size());
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << i << ": " << out[i] << " vs out64 " << g.out64[i]);
    REQUIRE(std::isnan(out[i]) == std::isnan(g.out64[i]));
    if (!std::isnan(g.out64[i])) worst = std::fmax(worst, std::fabs(double{out[i]} - double{g.out64[i]}) / tolerance);
  }
  return worst;
}

// Values against a float64 evaluation: within 1e-5 * max(1, |expected|), -inf exactly where expected has
// it, NaN likewise (lse; the score stages). worst: the largest error / tolerance seen.
inline void check_lse(const std::vector<float>& lse, const std::vector<float>& lse64, double& worst) {
  REQUIRE(lse.size() == lse64.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    INFO("element " << i << ": " << lse[i] << " vs " << lse64[i]);
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

}  // namespace mha_test
