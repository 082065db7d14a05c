// KVCache::reorder (docs/spec.md 5.4): after reorder(indices), sequence b holds exactly what sequence
// indices[b] held (every stored element, its length, its special_from), for every dtype, ragged lengths
// and every shape of index list (identity, swaps, cycles, repeats, drops, cycles with chains hanging off
// them); and an index out of range changes nothing.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "mha/cache/kv_cache.hpp"
#include "test_util.hpp"

using mha::CacheDType;
using mha::Status;

namespace {

constexpr int32_t kBatch = 6, kHeads = 2, kDh = 40, kDv = 24, kCapacity = 100;

// Every stored element of sequence b (keys then values, head-major), its length and special_from.
struct Snapshot {
  std::vector<float> elements;
  int32_t length = 0, special_from = 0;
};

Snapshot snapshot(const mha::KVCache& cache, int32_t b) {
  Snapshot s;
  s.length = cache.length(b);
  s.special_from = cache.special_from(b);
  for (int32_t g = 0; g < kHeads; ++g)
    for (int32_t j = 0; j < s.length; ++j) {
      for (int32_t d = 0; d < kDh; ++d) s.elements.push_back(cache.key(b, g, j, d));
      for (int32_t d = 0; d < kDv; ++d) s.elements.push_back(cache.value(b, g, j, d));
    }
  return s;
}

// A cache whose sequences hold different tokens and lengths (sequence 4 empty; with float16 an inf in
// sequence 2, so that special_from moves too).
std::unique_ptr<mha::KVCache> filled(CacheDType dtype) {
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create({kBatch, kHeads, kDh, kCapacity, dtype, kDv}, cache) == Status::kOk);
  const int32_t n = 70;
  std::vector<float> k = mha_test::random_tensor(size_t(kBatch) * n * kHeads * kDh, 7);
  const std::vector<float> v = mha_test::random_tensor(size_t(kBatch) * n * kHeads * kDv, 8);
  if (dtype == CacheDType::kFloat16) k[(size_t(2) * n + 5) * kHeads * kDh + 3] = std::numeric_limits<float>::infinity();
  const std::vector<int32_t> counts = {70, 33, 9, 64, 0, 31};
  const mha::TensorView<const float> kv{k.data(), int64_t{n} * kHeads * kDh, kHeads * kDh};
  const mha::TensorView<const float> vv{v.data(), int64_t{n} * kHeads * kDv, kHeads * kDv};
  REQUIRE(cache->append(kv, vv, n, nullptr, counts.data()) == Status::kOk);
  return cache;
}

}  // namespace

TEST_CASE("reorder: sequence b holds what indices[b] held, for every dtype and index pattern", "[kv_cache][reorder]") {
  const std::vector<std::vector<int32_t>> patterns = {
      {0, 1, 2, 3, 4, 5},  // nothing moves
      {1, 0, 2, 3, 4, 5},  // a swap
      {1, 2, 0, 4, 5, 3},  // two 3-cycles
      {0, 0, 0, 3, 3, 5},  // beams kept twice and thrice, others dropped
      {5, 4, 3, 2, 1, 0},  // reversed: three swaps
      {2, 2, 2, 2, 2, 2},  // one beam everywhere
      {1, 2, 0, 0, 1, 2},  // a cycle that others also read
      {3, 0, 1, 2, 3, 4},  // a chain ending in a 4-cycle
  };
  for (CacheDType dtype :
       {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    for (const std::vector<int32_t>& indices : patterns) {
      INFO("dtype " << static_cast<int>(dtype) << " indices " << indices[0] << indices[1] << indices[2] << indices[3]
                    << indices[4] << indices[5]);
      std::unique_ptr<mha::KVCache> cache = filled(dtype);
      std::vector<Snapshot> before;
      for (int32_t b = 0; b < kBatch; ++b) before.push_back(snapshot(*cache, b));
      REQUIRE(cache->reorder(indices.data()) == Status::kOk);
      for (int32_t b = 0; b < kBatch; ++b) {
        INFO("sequence " << b);
        const Snapshot after = snapshot(*cache, b);
        const Snapshot& expected = before[size_t(indices[size_t(b)])];
        REQUIRE(after.length == expected.length);
        REQUIRE(after.special_from == expected.special_from);
        REQUIRE(mha_test::bit_equal(after.elements, expected.elements));
      }
    }
  }
}

TEST_CASE("reorder: an index out of range changes nothing", "[kv_cache][reorder]") {
  std::unique_ptr<mha::KVCache> cache = filled(CacheDType::kInt8);
  std::vector<Snapshot> before;
  for (int32_t b = 0; b < kBatch; ++b) before.push_back(snapshot(*cache, b));
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 0, 2, 3, 4, 6}, std::vector<int32_t>{-1, 0, 1, 2, 3, 4}}) {
    REQUIRE(cache->reorder(bad.data()) == Status::kCacheBadIndices);
  }
  REQUIRE(cache->reorder(nullptr) == Status::kNullPointer);
  for (int32_t b = 0; b < kBatch; ++b) {
    const Snapshot after = snapshot(*cache, b);
    REQUIRE(after.length == before[size_t(b)].length);
    REQUIRE(mha_test::bit_equal(after.elements, before[size_t(b)].elements));
  }
}
