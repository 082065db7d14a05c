// split_heads / merge_heads: the spec's view + transpose, checked element by element and as inverses.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <vector>

#include "mha/core/heads.hpp"
#include "test_util.hpp"

using mha::Status;

TEST_CASE("split_heads puts x[b, s, h*Dh + e] at xh[b, h, s, e]", "[heads]") {
  const int32_t B = 2, S = 3, D = 12, H = 3, Dh = D / H;
  std::vector<float> x(B * S * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);  // value = its (B,S,D) flat index
  std::vector<float> xh(x.size(), -1.0f);
  REQUIRE(mha::split_heads(x.data(), B, S, D, H, xh.data()) == Status::kOk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int e = 0; e < Dh; ++e) {
          INFO("b=" << b << " h=" << h << " s=" << s << " e=" << e);
          REQUIRE(xh[((b * H + h) * S + s) * Dh + e] == static_cast<float>((b * S + s) * D + h * Dh + e));
        }
}

TEST_CASE("merge_heads(split_heads(x)) == x bit-exactly, NaN payloads and signed zeros included", "[heads]") {
  for (auto [B, S, D, H] : std::vector<std::array<int32_t, 4>>{
           {1, 1, 1, 1}, {2, 5, 12, 3}, {3, 7, 21, 7}, {1, 9, 30, 5}, {2, 4, 64, 64}, {1, 3, 17, 1}}) {
    INFO("B=" << B << " S=" << S << " D=" << D << " H=" << H);
    auto x = mha_test::random_tensor(static_cast<size_t>(B) * S * D, 77);
    x[0] = -0.0f;
    uint32_t nan_bits = 0x7fc01234u;  // a NaN with a payload must survive the round trip
    std::memcpy(&x[x.size() / 2], &nan_bits, sizeof nan_bits);
    std::vector<float> xh(x.size()), back(x.size());
    REQUIRE(mha::split_heads(x.data(), B, S, D, H, xh.data()) == Status::kOk);
    REQUIRE(mha::merge_heads(xh.data(), B, S, D, H, back.data()) == Status::kOk);
    REQUIRE(std::memcmp(x.data(), back.data(), x.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("split/merge take sequences whose S x S would pass 2^31 (they have no (S, T) tensor)", "[heads]") {
  const int32_t B = 1, S = 50000, D = 4, H = 2;  // B*S*S = 2.5e9, B*S*D = 2e5
  auto x = mha_test::random_tensor(static_cast<size_t>(B) * S * D, 78);
  std::vector<float> xh(x.size()), back(x.size());
  REQUIRE(mha::split_heads(x.data(), B, S, D, H, xh.data()) == Status::kOk);
  CHECK(xh[size_t(1) * S * 2 + 3 * 2 + 1] == x[size_t(3) * D + 1 * 2 + 1]);  // xh[0, 1, 3, 1] = x[0, 3, 1*2 + 1]
  REQUIRE(mha::merge_heads(xh.data(), B, S, D, H, back.data()) == Status::kOk);
  REQUIRE(std::memcmp(x.data(), back.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("split/merge reject bad shapes before touching memory", "[heads][validation]") {
  // Null buffers with a bad shape: the shape error comes first and nothing is dereferenced.
  CHECK(mha::split_heads(nullptr, 0, 1, 4, 2, nullptr) == Status::kNonPositiveDim);
  CHECK(mha::split_heads(nullptr, 1, -3, 4, 2, nullptr) == Status::kNonPositiveDim);
  CHECK(mha::merge_heads(nullptr, 1, 1, 10, 3, nullptr) == Status::kHeadsDoNotDivide);
  CHECK(mha::merge_heads(nullptr, 1 << 16, 1 << 16, 1 << 10, 1, nullptr) == Status::kTooLarge);
  float one = 1.0f;
  CHECK(mha::split_heads(&one, 1, 1, 1, 1, nullptr) == Status::kNullPointer);
}
