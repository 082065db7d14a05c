// Helpers shared by the Catch2 tests: seeded random tensors and dense argument bundles.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "mha/shape.hpp"

namespace mha_test {

// Standard-normal floats times `scale` from a seeded generator (tests print the seed with INFO).
inline std::vector<float> random_tensor(size_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator) * scale;
  return values;
}

// Owns q, k, v, out of one problem and hands out dense AttentionArgs over them.
struct Problem {
  mha::AttentionShape shape;
  std::vector<float> q, k, v, out;
  std::vector<uint8_t> mask;  // empty = no mask
  bool causal = false;

  Problem(mha::AttentionShape s, uint32_t seed, float input_scale = 1.0f)
      : shape(s),
        q(random_tensor(static_cast<size_t>(s.q_elements()), seed, input_scale)),
        k(random_tensor(static_cast<size_t>(s.kv_elements()), seed + 1, input_scale)),
        v(random_tensor(static_cast<size_t>(s.kv_elements()), seed + 2, input_scale)),
        out(static_cast<size_t>(s.q_elements()), -12345.0f) {}

  mha::AttentionArgs args() {
    mha::AttentionArgs a;
    a.shape = shape;
    a.q = mha::dense_view<const float>(q.data(), shape.seq_len, shape.d_model);
    a.k = mha::dense_view<const float>(k.data(), shape.kv_seq_len, shape.d_model);
    a.v = mha::dense_view<const float>(v.data(), shape.kv_seq_len, shape.d_model);
    a.out = mha::dense_view<float>(out.data(), shape.seq_len, shape.d_model);
    a.mask = mask.empty() ? nullptr : mask.data();
    a.causal = causal;
    a.scale = mha::default_scale(shape.head_dim());
    return a;
  }
};

}  // namespace mha_test
