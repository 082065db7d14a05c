// The reference (and split_heads) against the PyTorch golden vectors in tests/golden/v1.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "mha/heads.hpp"
#include "mha/reference.hpp"

namespace {

const std::string kGoldenDir = MHA_GOLDEN_DIR;

struct GoldenCase {
  std::string name;
  mha::AttentionShape shape;
  bool has_mask = false;
};

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// cases.json is a flat array of objects; the few fields needed here are found by key within each
// object's text, which is enough for this fixed, generated file.
std::string field(const std::string& object, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t at = object.find(quoted);
  REQUIRE(at != std::string::npos);
  at = object.find(':', at) + 1;
  while (object[at] == ' ') ++at;
  if (object[at] == '"') return object.substr(at + 1, object.find('"', at + 1) - at - 1);
  return object.substr(at, object.find_first_of(",}\n", at) - at);
}

std::vector<GoldenCase> load_cases() {
  const std::string json = read_text(kGoldenDir + "/cases.json");
  REQUIRE_FALSE(json.empty());
  std::vector<GoldenCase> cases;
  size_t at = 0;
  while ((at = json.find("\"name\"", at)) != std::string::npos) {
    const size_t end = json.find("\"files\"", at);
    const std::string object = json.substr(at, end - at);
    GoldenCase c;
    c.name = field(object, "name");
    c.shape = mha::AttentionShape{std::stoi(field(object, "batch")), std::stoi(field(object, "seqLen")),
                                  std::stoi(field(object, "kvSeqLen")), std::stoi(field(object, "dModel")),
                                  std::stoi(field(object, "numHeads"))};
    c.has_mask = field(object, "hasMask") == "true";
    cases.push_back(c);
    at = end;
  }
  return cases;
}

template <typename T>
std::vector<T> read_raw(const std::string& file, int64_t expected_count) {
  std::ifstream in(kGoldenDir + "/" + file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(static_cast<int64_t>(bytes.size()) == expected_count * static_cast<int64_t>(sizeof(T)));
  std::vector<T> values(static_cast<size_t>(expected_count));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

float max_abs_finite(const std::vector<float>& values) {
  float m = 0.0f;
  for (float v : values)
    if (std::isfinite(v)) m = std::fmax(m, std::fabs(v));
  return m;
}

}  // namespace

TEST_CASE("golden: reference, weights and split_heads match PyTorch on every case", "[golden]") {
  const auto cases = load_cases();
  REQUIRE(cases.size() >= 18);
  double worst_ratio = 0.0;
  for (const GoldenCase& c : cases) {
    INFO("case " << c.name);
    const auto& s = c.shape;
    const auto q = read_raw<float>(c.name + ".q.f32", s.q_elements());
    const auto k = read_raw<float>(c.name + ".k.f32", s.kv_elements());
    const auto v = read_raw<float>(c.name + ".v.f32", s.kv_elements());
    const auto out64 = read_raw<float>(c.name + ".out64.f32", s.q_elements());
    const auto out32 = read_raw<float>(c.name + ".out32.f32", s.q_elements());
    std::vector<uint8_t> mask;
    if (c.has_mask) mask = read_raw<uint8_t>(c.name + ".mask.u8", s.mask_elements());

    std::vector<float> out(out64.size());
    mha::AttentionArgs args;
    args.shape = s;
    args.q = mha::dense_view(q.data(), s.seq_len, s.d_model);
    args.k = mha::dense_view(k.data(), s.kv_seq_len, s.d_model);
    args.v = mha::dense_view(v.data(), s.kv_seq_len, s.d_model);
    args.out = mha::dense_view(out.data(), s.seq_len, s.d_model);
    args.mask = c.has_mask ? mask.data() : nullptr;
    args.scale = mha::default_scale(s.head_dim());
    REQUIRE(mha::reference_attention(args) == mha::Status::kOk);

    // The tolerance: max(1e-5 * max(1, max|out64|), 2 * max|out32 - out64|).
    float torch_error = 0.0f;
    for (size_t i = 0; i < out64.size(); ++i)
      if (std::isfinite(out64[i])) torch_error = std::fmax(torch_error, std::fabs(out32[i] - out64[i]));
    const double tolerance = std::fmax(1e-5 * std::fmax(1.0f, max_abs_finite(out64)), 2.0 * torch_error);
    for (size_t i = 0; i < out64.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::isnan(out[i]) == std::isnan(out64[i]));
      if (std::isnan(out64[i])) continue;
      const double error = std::fabs(double{out[i]} - double{out64[i]});
      REQUIRE(error <= tolerance);
      worst_ratio = std::fmax(worst_ratio, error / tolerance);
    }

    const auto weights64 = read_raw<float>(c.name + ".weights64.f32", s.weights_elements());
    std::vector<float> weights(weights64.size());
    REQUIRE(mha::reference_attention_weights(args, weights.data()) == mha::Status::kOk);
    for (size_t i = 0; i < weights.size(); ++i) {
      REQUIRE(std::isnan(weights[i]) == std::isnan(weights64[i]));
      if (!std::isnan(weights64[i])) REQUIRE(std::fabs(weights[i] - weights64[i]) <= 1e-6f);
    }

    const auto split_q = read_raw<float>(c.name + ".split_q.f32", s.q_elements());
    std::vector<float> split(split_q.size());
    REQUIRE(mha::split_heads(q.data(), s.batch, s.seq_len, s.d_model, s.num_heads, split.data()) == mha::Status::kOk);
    REQUIRE(std::memcmp(split.data(), split_q.data(), split.size() * sizeof(float)) == 0);
  }
  // The double-precision reference rounds to out64's float32 within a unit or two of the last place.
  WARN("worst |reference - out64| / tolerance over the golden set: " << worst_ratio);
  CHECK(worst_ratio < 0.1);
}
