// Bad calls are refused as status values before any memory is touched (the wasm instance survives
// them), and large calls that form no (S, T) tensor are accepted.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using mha::AttentionShape;
using mha::Status;
using namespace mha_test;

TEST_CASE("validation: bad shapes, pointers and scales are refused as values", "[validation]") {
  Problem p(AttentionShape{1, 2, 2, 4, 2}, 14);
  auto args = p.args();
  for (auto [shape, expected] : std::vector<std::pair<AttentionShape, Status>>{
           {{0, 2, 2, 4, 2}, Status::kNonPositiveDim},
           {{1, -1, 2, 4, 2}, Status::kNonPositiveDim},
           {{1, 2, 0, 4, 2}, Status::kNonPositiveDim},
           {{1, 2, 2, 0, 2}, Status::kNonPositiveDim},
           {{1, 2, 2, 4, 0}, Status::kNonPositiveDim},
           {{1, 2, 2, 10, 4}, Status::kHeadsDoNotDivide},
           {{1 << 20, 1 << 10, 2, 4, 2}, Status::kTooLarge},                          // q has 2^32 elements
           {{1, 2, 1 << 30, 4, 2}, Status::kTooLarge},                                // k has 2^32 elements
           {{0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 1}, Status::kTooLarge},  // no int64 overflow
       }) {
    INFO("shape " << shape.batch << "," << shape.seq_len << "," << shape.kv_seq_len << "," << shape.d_model << ","
                  << shape.num_heads);
    args.shape = shape;
    CHECK(mha::reference_attention(args) == expected);  // must not touch the (too small) buffers
  }
  // A (B, S, T) mask of 2^32 elements is too large; without a mask the same dims form no such tensor.
  const uint8_t mask_byte = 1;
  args.shape = AttentionShape{1, 65536, 65536, 2, 2};
  args.mask = &mask_byte;
  CHECK(mha::reference_attention(args) == Status::kTooLarge);
  CHECK(mha::validate_shape(args.shape, mha::ScoreTensor::kNone) == Status::kOk);
  args = p.args();
  args.k.data = nullptr;
  CHECK(mha::reference_attention(args) == Status::kNullPointer);
  args = p.args();
  for (float scale : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    args.scale = scale;
    CHECK(mha::reference_attention(args) == Status::kBadScale);
  }
  // weights (B,H,S,T) is checked too: 4 * 2^15 * 2^15 * 1 = 2^32 weights
  args = p.args();
  args.shape = AttentionShape{4, 1 << 15, 1 << 15, 4, 4};
  CHECK(mha::validate_shape(args.shape, mha::ScoreTensor::kMask) == Status::kTooLarge);  // mask alone is 2^32
  CHECK(mha::validate_shape(args.shape, mha::ScoreTensor::kNone) == Status::kOk);        // no (S, T) tensor without it
  args.shape = AttentionShape{1, 1 << 15, 1 << 15, 4, 4};
  CHECK(mha::validate_shape(args.shape, mha::ScoreTensor::kMask) == Status::kOk);
  CHECK(mha::validate_shape(args.shape, mha::ScoreTensor::kWeights) == Status::kTooLarge);
  CHECK(std::string(mha::status_name(Status::kHeadsDoNotDivide)) == "d_model not divisible by num_heads");
}

TEST_CASE("validation: every kernel variant reports bad arguments as status values", "[validation][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  Problem p = make_problem({1, 3, 3, 4, 2}, 51);
  std::vector<float> out;
  mha::Workspace ws;
  mha::AttentionArgs a = p.args(out);
  a.scale = kNaN;
  REQUIRE(mha::attention(a, ws, kernel) == mha::Status::kBadScale);
  a = p.args(out);
  a.v.data = nullptr;
  REQUIRE(mha::attention(a, ws, kernel) == mha::Status::kNullPointer);
  a = p.args(out);
  a.shape.num_heads = 3;
  REQUIRE(mha::attention(a, ws, kernel) == mha::Status::kHeadsDoNotDivide);
}

TEST_CASE("validation: S * T beyond 2^31 without a mask runs (tiles only); with a mask it is too large",
          "[validation][kernels]") {
  // The build's default kernel only: about 1e9 query-key pairs take the scalar variant half a minute
  // natively and minutes under ASan.
  const mha::KernelVariant& kernel = mha::default_kernel();
  INFO("kernel " << kernel.name);
  // 46341^2 = 2,147,488,281 > 2^31 - 1; causal halves the work (about 1.07e9 query-key pairs).
  const Problem p = make_problem({1, 46341, 46341, 2, 2}, 91, 1.0f, MaskKind::kNone, /*causal=*/true);
  std::vector<float> fast, ref;
  mha::AttentionArgs args = p.args(fast);
  mha::Workspace workspace;
  REQUIRE(mha::attention(args, workspace, kernel) == mha::Status::kOk);
  mha::AttentionArgs ref_args = p.args(ref);
  for (int32_t row : {0, 1, 777, 23170, 46339, 46340}) {
    INFO("row " << row);
    double acc[2];
    mha::reference_attention_query(ref_args, 0, 0, row, acc);
    mha::reference_attention_query(ref_args, 0, 1, row, acc);
    for (int32_t c = 0; c < 2; ++c) {
      const float f = fast[size_t(row) * 2 + c], r = ref[size_t(row) * 2 + c];
      REQUIRE(std::isfinite(f));
      REQUIRE(std::fabs(f - r) <= kTol * (1.0f + std::fabs(r)));
    }
  }
  // Row 0 sees only key 0: its output is v[0] exactly, per head.
  REQUIRE(fast[0] == p.v[0]);
  REQUIRE(fast[1] == p.v[1]);
  // A mask would be a (B, S, T) tensor of 2^31 bytes or more: refused before any memory is touched.
  const uint8_t any_byte = 1;
  args.mask = &any_byte;
  REQUIRE(mha::attention(args, workspace, kernel) == mha::Status::kTooLarge);
}

TEST_CASE("validation: bad options are refused as status values by the reference and every kernel variant",
          "[validation][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  Problem p = make_problem({2, 3, 4, 8, 4, 2}, 15);
  std::vector<float> out;
  mha::Workspace ws;
  const std::vector<int32_t> lengths_bad{4, 5}, lengths_negative{-1, 2}, lengths_ok{0, 4};
  const std::vector<float> slopes_bad{0.5f, kNaN, 0.25f, 0.125f}, slopes_inf{kInf, 0.5f, 0.25f, 0.125f};
  struct Bad {
    const char* what;
    void (*edit)(mha::AttentionArgs&, const void*);
    const void* data;
    Status expected;
  };
  const Bad cases[] = {
      {"num_kv_heads 3 does not divide 4", [](mha::AttentionArgs& a, const void*) { a.shape.num_kv_heads = 3; },
       nullptr, Status::kKvHeadsDoNotDivide},
      {"num_kv_heads -1", [](mha::AttentionArgs& a, const void*) { a.shape.num_kv_heads = -1; }, nullptr,
       Status::kKvHeadsDoNotDivide},
      {"query_offset -1", [](mha::AttentionArgs& a, const void*) { a.query_offset = -1; }, nullptr,
       Status::kBadQueryOffset},
      {"query_offset + S beyond int32", [](mha::AttentionArgs& a, const void*) { a.query_offset = 0x7ffffffe; },
       nullptr, Status::kBadQueryOffset},
      {"window_left -2", [](mha::AttentionArgs& a, const void*) { a.window_left = -2; }, nullptr, Status::kBadWindow},
      {"window_right -5", [](mha::AttentionArgs& a, const void*) { a.window_right = -5; }, nullptr, Status::kBadWindow},
      {"kv_lengths 5 > T",
       [](mha::AttentionArgs& a, const void* d) { a.kv_lengths = static_cast<const std::vector<int32_t>*>(d)->data(); },
       &lengths_bad, Status::kBadKvLength},
      {"kv_lengths -1",
       [](mha::AttentionArgs& a, const void* d) { a.kv_lengths = static_cast<const std::vector<int32_t>*>(d)->data(); },
       &lengths_negative, Status::kBadKvLength},
      {"softcap NaN", [](mha::AttentionArgs& a, const void*) { a.softcap = kNaN; }, nullptr, Status::kBadSoftcap},
      {"softcap inf", [](mha::AttentionArgs& a, const void*) { a.softcap = kInf; }, nullptr, Status::kBadSoftcap},
      {"softcap -1", [](mha::AttentionArgs& a, const void*) { a.softcap = -1.0f; }, nullptr, Status::kBadSoftcap},
      {"ALiBi slope NaN",
       [](mha::AttentionArgs& a, const void* d) { a.alibi_slopes = static_cast<const std::vector<float>*>(d)->data(); },
       &slopes_bad, Status::kBadAlibiSlope},
      {"ALiBi slope inf",
       [](mha::AttentionArgs& a, const void* d) { a.alibi_slopes = static_cast<const std::vector<float>*>(d)->data(); },
       &slopes_inf, Status::kBadAlibiSlope},
      {"bias with a negative stride",
       [](mha::AttentionArgs& a, const void* d) {
         a.bias = mha::BiasView{static_cast<const std::vector<float>*>(d)->data(), -12, 0};
       },
       &slopes_bad, Status::kBadBiasShape},
      {"empty_rows 2", [](mha::AttentionArgs& a, const void*) { a.empty_rows = static_cast<mha::EmptyRows>(2); },
       nullptr, Status::kBadEmptyRows},
  };
  for (const Bad& bad : cases) {
    INFO(bad.what);
    mha::AttentionArgs a = p.args(out);
    bad.edit(a, bad.data);
    CHECK(mha::reference_attention(a) == bad.expected);
    CHECK(mha::attention(a, ws, kernel) == bad.expected);
    std::vector<float> weights(size_t(p.shape.weights_elements()));
    CHECK(mha::reference_attention_weights(a, weights.data()) == bad.expected);
  }
  // Every bound at its limit is accepted.
  mha::AttentionArgs a = p.args(out);
  a.kv_lengths = lengths_ok.data();
  a.query_offset = 0x7fffffff - 3;
  a.window_left = 0;
  a.window_right = -1;
  a.softcap = 0.0f;
  CHECK(mha::attention(a, ws, kernel) == Status::kOk);
  CHECK(mha::reference_attention(a) == Status::kOk);
}

TEST_CASE("validation: every status has a name and a message", "[validation]") {
  for (int32_t n = 0; n <= static_cast<int32_t>(mha::kLastStatus); ++n) {
    INFO("status " << n);
    const Status status = static_cast<Status>(n);
    REQUIRE(mha::status_message(status) != nullptr);
    CHECK(std::string(mha::status_name(status)) != "unknown status");
  }
  CHECK(mha::status_message(static_cast<Status>(static_cast<int32_t>(mha::kLastStatus) + 1)) == nullptr);
}
