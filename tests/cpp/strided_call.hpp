// One attention call with the v0.3 options (Dv of its own, sinks, rope) over buffers that may be
// misaligned and strided: q (B, S, H*Dh), k (B, T, Hkv*Dh), v (B, T, Hkv*Dv), out (B, S, H*Dv), lse
// (B, H, S). Padding floats hold NaN, so a read outside the described tensors shows up in the output.
// Shared by the kernel, parallel and KV cache tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mha/core/shape.hpp"
#include "test_util.hpp"

namespace mha_test {

// Rope tables of `positions` rows as ropeTables computes them: angle = p * theta^(-2r / rotary_dim), in
// double, rounded to float32.
inline void rope_tables(int32_t rotary_dim, int32_t positions, double theta, std::vector<float>& cos,
                        std::vector<float>& sin) {
  cos.clear();
  sin.clear();
  for (int32_t p = 0; p < positions; ++p) {
    for (int32_t r = 0; r < rotary_dim / 2; ++r) {
      const double angle = p * std::pow(theta, -2.0 * r / rotary_dim);
      cos.push_back(static_cast<float>(std::cos(angle)));
      sin.push_back(static_cast<float>(std::sin(angle)));
    }
  }
}

struct StridedCall {
  mha::AttentionShape shape;
  int32_t offset = 0, row_pad = 0;  // misalignment (floats) and extra floats per row of q, k, v
  std::vector<float> q, k, v, sinks, cos, sin, alibi, bias;
  std::vector<int32_t> kv_lengths;
  mha::AttentionArgs base;  // options; the tensors are set by args()

  StridedCall(mha::AttentionShape s, uint64_t seed, int32_t misalign = 0, int32_t pad = 0)
      : shape(s), offset(misalign), row_pad(pad) {
    q = strided(s.seq_len, s.d_model, seed);
    k = strided(s.kv_seq_len, s.kv_d_model(), seed + 1);
    v = strided(s.kv_seq_len, s.v_d_model(), seed + 2);
    base.shape = s;
    base.scale = mha::default_scale(s.head_dim());
  }

  // B * rows rows of `width` standard-normal floats, row_pad NaN after each and `offset` NaN before.
  std::vector<float> strided(int32_t rows, int64_t width, uint64_t seed) const {
    std::vector<float> buf(size_t(offset + int64_t{shape.batch} * rows * (width + row_pad)), kNaN);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t r = 0; r < int64_t{shape.batch} * rows; ++r) {
      for (int64_t c = 0; c < width; ++c) buf[size_t(offset + r * (width + row_pad) + c)] = normal(rng);
    }
    return buf;
  }

  mha::TensorView<const float> view(const std::vector<float>& buf, int32_t rows, int64_t width) const {
    return {buf.data() + offset, int64_t{rows} * (width + row_pad), width + row_pad};
  }

  // The call writing the dense out (resized, sentinel-filled) and, when lse is given, lse.
  mha::AttentionArgs args(std::vector<float>& out, std::vector<float>* lse = nullptr) const {
    mha::AttentionArgs a = base;
    a.q = view(q, shape.seq_len, shape.d_model);
    a.k = view(k, shape.kv_seq_len, shape.kv_d_model());
    a.v = view(v, shape.kv_seq_len, shape.v_d_model());
    out.assign(size_t(int64_t{shape.batch} * shape.seq_len * shape.out_d_model()), -12345.0f);
    a.out = {out.data(), int64_t{shape.seq_len} * shape.out_d_model(), shape.out_d_model()};
    if (lse != nullptr) {
      lse->assign(size_t(shape.batch) * shape.num_heads * shape.seq_len, 12345.0f);
      a.lse = lse->data();
    }
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    a.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
    a.kv_lengths = kv_lengths.empty() ? nullptr : kv_lengths.data();
    if (!bias.empty())
      a.bias = mha::BiasView{bias.data(), 0, int64_t{shape.seq_len} * shape.kv_seq_len};  // [1, H, S, T]
    if (!cos.empty()) {
      a.rope.cos = cos.data();
      a.rope.sin = sin.data();
    }
    return a;
  }

  void set_rope(int32_t rotary_dim, int32_t positions, bool interleaved, double theta = 10000.0) {
    rope_tables(rotary_dim, positions, theta, cos, sin);
    base.rope.positions = positions;
    base.rope.rotary_dim = rotary_dim;
    base.rope.interleaved = interleaved;
  }

  // Tables with cos 1, sin 0: the identity rotation.
  void set_identity_rope(int32_t rotary_dim, int32_t positions, bool interleaved) {
    set_rope(rotary_dim, positions, interleaved);
    std::fill(cos.begin(), cos.end(), 1.0f);
    std::fill(sin.begin(), sin.end(), 0.0f);
  }

  void random_sinks(uint64_t seed, float scale = 1.0f) { sinks = random_tensor(size_t(shape.num_heads), seed, scale); }
  void random_bias(uint64_t seed) {
    bias = random_tensor(size_t(shape.num_heads) * shape.seq_len * shape.kv_seq_len, seed);
  }
};

}  // namespace mha_test
