// The input decoding of the fuzz target (fuzz_attention.cpp; the format is tests/fuzz/README.md): the
// byte reader, strided tensors with exact extents and NaN-sentinel gaps, the value and scale generators,
// and the options tail.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/core/f16.hpp"  // float_bits, bits_float
#include "mha/core/shape.hpp"

namespace fuzz {

// Reads the input front to back (unlike FuzzedDataProvider, whose integers come from the end), so the
// corpus files read in the order tests/fuzz/README.md documents; past the end every read gives 0.
struct Reader {
  const uint8_t* data;
  size_t size, pos = 0;
  size_t remaining_bytes() const { return size - pos; }
  uint8_t u8() { return pos < size ? data[pos++] : 0; }
  uint16_t u16() { return uint16_t(u8() | u8() << 8); }
  uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
  uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
  float f32() { return mha::f16::bits_float(u32()); }
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr double kU = 1.0 / (1 << 24);          // float32 unit roundoff
constexpr uint32_t kSentinelBits = 0x7fc0dead;  // a NaN with a recognizable payload

float sentinel() { return mha::f16::bits_float(kSentinelBits); }
bool is_sentinel(float f) { return mha::f16::float_bits(f) == kSentinelBits; }

// A strided (B, rows, D) tensor in a buffer of exactly the size it needs (plus a leading offset), so
// ASan reports any read past its last element. Gap elements (row and batch padding) hold the sentinel.
struct Strided {
  std::vector<float> storage;  // exact extent: offset + (B-1)*batch_stride + (rows-1)*row_stride + D
  int32_t offset = 0;
  int64_t row_stride = 0, batch_stride = 0;
  int32_t batch = 0, rows = 0, d = 0;

  Strided(int32_t b, int32_t r, int32_t dm, int32_t off, int32_t row_pad, int32_t batch_pad)
      : offset(off),
        row_stride(dm + row_pad),
        batch_stride(int64_t{r} * (dm + row_pad) + batch_pad),
        batch(b),
        rows(r),
        d(dm) {
    const size_t extent = size_t(off) + size_t((b - 1) * batch_stride + (r - 1) * row_stride + dm);
    storage.assign(extent, sentinel());
  }
  float& at(int32_t b, int32_t r, int32_t c) { return storage[size_t(offset + b * batch_stride + r * row_stride + c)]; }
  float at(int32_t b, int32_t r, int32_t c) const {
    return storage[size_t(offset + b * batch_stride + r * row_stride + c)];
  }
  bool is_element(size_t index) const {
    if (index < size_t(offset)) return false;
    const int64_t rel = int64_t(index) - offset;
    const int64_t in_batch = rel % batch_stride;
    return (rel / batch_stride) < batch && in_batch / row_stride < rows && in_batch % row_stride < d;
  }
  template <typename T>
  mha::TensorView<T> view() {
    return mha::TensorView<T>{storage.data() + offset, batch_stride, row_stride};
  }
};

void fill_values(std::vector<float*>& cells, uint8_t kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-149, 127);
  const float constant = normal(rng);
  for (float* cell : cells) {
    float x = 0.0f;
    switch (kind % 8) {
      case 0:
      case 1: x = normal(rng); break;          // ordinary
      case 2: x = normal(rng) * 30.0f; break;  // logits near exp's range
      case 3: x = std::ldexp(normal(rng), std::uniform_int_distribution<int>(-30, 30)(rng)); break;  // wide
      case 4: x = std::ldexp(1.0f + std::abs(normal(rng)), exponent(rng)) * (rng() & 1 ? 1.f : -1.f); break;
      case 5: x = constant; break;                       // all equal
      case 6: x = std::ldexp(normal(rng), -140); break;  // denormals
      case 7: x = normal(rng) * 1e9f; break;             // huge: one-hot softmax, large E
    }
    *cell = x;
  }
}

float special_value(uint8_t kind) {
  switch (kind % 12) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2: return -kInf;
    case 3: return std::numeric_limits<float>::denorm_min();
    case 4: return -0.0f;
    case 5: return kFltMax;
    case 6: return -kFltMax;
    case 7: return 1e30f;
    case 8: return -1e30f;
    case 9: return 1e-30f;
    case 10: return 88.0f;
    default: return 0.0f;
  }
}

float pick_scale(uint8_t kind, Reader& in, int32_t head_dim) {
  switch (kind % 10) {
    case 0:
    case 1:
    case 2: return mha::default_scale(head_dim);
    case 3: return 0.0f;
    case 4: return -mha::default_scale(head_dim);
    case 5: return float(int8_t(in.u8())) / 32.0f;  // [-4, 4)
    case 6: return 1e30f;
    case 7: return 1e-30f;
    case 8: return std::numeric_limits<float>::denorm_min();
    default: {  // any finite float
      const float f = in.f32();
      return std::isfinite(f) ? f : kFltMax;
    }
  }
}

int32_t pick_len(uint8_t byte) {
  // Mostly short; sometimes across the 64-row / 64-key tiles and the 4-row / 8-key micro-kernels.
  if (byte < 160) return 1 + byte % 9;
  if (byte < 230) return 1 + byte % 40;
  return 60 + byte % 80;
}

// The options of an input's "OPTS" tail (all off without one).
struct FuzzOptions {
  bool present = false;
  uint8_t bytes[12] = {};
};

constexpr char kOptionsMagic[4] = {'O', 'P', 'T', 'S'};
constexpr size_t kOptionBytes = sizeof(FuzzOptions::bytes);

// Splits the options tail off the input: returns them and shortens `size` to the bytes before it.
FuzzOptions split_options(const uint8_t* data, size_t& size) {
  FuzzOptions o;
  if (size >= 19 + sizeof kOptionsMagic + kOptionBytes &&
      std::memcmp(data + size - kOptionBytes - sizeof kOptionsMagic, kOptionsMagic, sizeof kOptionsMagic) == 0) {
    o.present = true;
    std::memcpy(o.bytes, data + size - kOptionBytes, kOptionBytes);
    size -= kOptionBytes + sizeof kOptionsMagic;
  }
  return o;
}

int32_t window_bound(uint8_t byte) {
  constexpr int32_t kBounds[] = {-1, 0, 1, 2, 3, 7, 63, 64, 65};
  return kBounds[byte % 9];
}

// The buffers the options point into (kept alive for the call).
struct OptionBuffers {
  std::vector<int32_t> kv_lengths;
  std::vector<float> slopes, bias, sinks, cos, sin;
};

// The v0.3 options of an input's "V3OP" tail (docs/spec.md Part 4): just before the OPTS tail, or at the
// end without one. Inputs without it (every older corpus file) decode as before.
struct V3Options {
  bool present = false;
  uint8_t bytes[4] = {};
};
constexpr char kV3Magic[4] = {'V', '3', 'O', 'P'};
constexpr size_t kV3Bytes = sizeof(V3Options::bytes);

inline V3Options split_v3(const uint8_t* data, size_t& size) {
  V3Options o;
  if (size >= 19 + sizeof kV3Magic + kV3Bytes &&
      std::memcmp(data + size - kV3Bytes - sizeof kV3Magic, kV3Magic, sizeof kV3Magic) == 0) {
    o.present = true;
    std::memcpy(o.bytes, data + size - kV3Bytes, kV3Bytes);
    size -= kV3Bytes + sizeof kV3Magic;
  }
  return o;
}

// Byte 0 of the V3 tail: Dv (b % 6): Dh; 1; 5; 13; 20; 1 + (b / 6) % 70.
inline int32_t pick_value_dim(const V3Options& v3) {
  if (!v3.present) return 0;
  constexpr int32_t kDims[] = {0, 1, 5, 13, 20};
  const uint8_t b = v3.bytes[0];
  return b % 6 < 5 ? kDims[b % 6] : 1 + (b / 6) % 70;
}

// Bytes 1-3 of the V3 tail on args (whose shape, query_offset and the other options are set):
//   1: sinks (b % 5): none; 2 * normal; 30 (dominating every ordinary logit); -1e30 (none, in effect);
//      each a special finite value (0, FLT_MAX, -FLT_MAX, 1e30, denorm_min, 88)
//   2: rope (b % 3): none, rotate_half, interleaved; rotary_dim = 2 * (1 + (b / 3) % (Dh / 2))
//   3: rope tables (b % 3): angles p * 10000^(-2r / rotary_dim); cos 1 sin 0; standard-normal values
// Rope needs Dh >= 2 and positions below 4096 (the tables hold max(query_offset + S, T) rows).
inline void apply_v3(const V3Options& v3, uint64_t seed, mha::AttentionArgs& args, OptionBuffers& buffers) {
  if (!v3.present) return;
  const uint8_t* o = v3.bytes;
  const mha::AttentionShape& shape = args.shape;
  std::mt19937_64 rng(seed ^ 0x5851f42d4c957f2dull);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (o[1] % 5 != 0) {
    constexpr float kSpecial[] = {0.0f, kFltMax, -kFltMax, 1e30f, std::numeric_limits<float>::denorm_min(), 88.0f};
    for (int32_t h = 0; h < shape.num_heads; ++h) {
      const float x = o[1] % 5 == 1   ? 2.0f * normal(rng)
                      : o[1] % 5 == 2 ? 30.0f
                      : o[1] % 5 == 3 ? -1e30f
                                      : kSpecial[rng() % 6];
      buffers.sinks.push_back(x);
    }
    args.sinks = buffers.sinks.data();
  }
  const int32_t dh = shape.head_dim();
  const int64_t positions = std::max<int64_t>(int64_t{args.query_offset} + shape.seq_len, shape.kv_seq_len);
  if (o[2] % 3 == 0 || dh < 2 || positions > 4096) return;
  const int32_t rotary = 2 * (1 + (o[2] / 3) % (dh / 2));
  for (int64_t p = 0; p < positions; ++p) {
    for (int32_t r = 0; r < rotary / 2; ++r) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * r / rotary);
      const int kind = o[3] % 3;
      buffers.cos.push_back(kind == 0 ? float(std::cos(angle)) : kind == 1 ? 1.0f : normal(rng));
      buffers.sin.push_back(kind == 0 ? float(std::sin(angle)) : kind == 1 ? 0.0f : normal(rng));
    }
  }
  args.rope = mha::RotaryTables{buffers.cos.data(), buffers.sin.data(), int32_t(positions), rotary, o[2] % 3 == 2};
}

// q or k rotated in double as the reference does, with each entry's magnitude bound |a c| + |b s| (what
// the float32 rotation's rounding is relative to): (B, rows, width) dense, heads of head_dim.
struct RotatedTensor {
  std::vector<double> value, magnitude;
  int32_t rows = 0, width = 0;
  double at(int32_t b, int32_t r, int32_t c) const { return value[(size_t(b) * rows + r) * width + c]; }
  double mag(int32_t b, int32_t r, int32_t c) const { return magnitude[(size_t(b) * rows + r) * width + c]; }
};

inline RotatedTensor rotate_tensor(const Strided& t, const mha::RotaryTables& rope, int32_t head_dim,
                                   int64_t first_position) {
  RotatedTensor out;
  out.rows = t.rows;
  out.width = t.d;
  out.value.resize(size_t(t.batch) * t.rows * t.d);
  out.magnitude.resize(out.value.size());
  const int32_t half = rope.rotary_dim / 2;
  for (int32_t b = 0; b < t.batch; ++b)
    for (int32_t r = 0; r < t.rows; ++r)
      for (int32_t c = 0; c < t.d; ++c) {
        const int32_t d = c % head_dim, base = c - d;
        const size_t at = (size_t(b) * t.rows + r) * t.d + c;
        const double x = t.at(b, r, c);
        out.value[at] = x;
        out.magnitude[at] = std::abs(x);
        if (!rope.enabled() || d >= rope.rotary_dim) continue;
        const int32_t pair = rope.interleaved ? d / 2 : d % half;
        const bool first = rope.interleaved ? d % 2 == 0 : d < half;
        const int32_t other = rope.interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half);
        const int64_t row = (first_position + r) * half + pair;
        const double cs = rope.cos[row], sn = rope.sin[row], y = t.at(b, r, base + other);
        out.value[at] = first ? x * cs - y * sn : x * cs + y * sn;
        out.magnitude[at] = std::abs(x * cs) + std::abs(y * sn);
      }
  return out;
}

// Sets the options of the tail on args (whose shape, q, k, v and mask are set), from the tail's bytes and a
// PRNG stream of their own (seeded from the input's seed), so the bulk values do not depend on them.
inline void apply_options(const FuzzOptions& options, uint64_t seed, mha::AttentionArgs& args, OptionBuffers& buffers) {
  const uint8_t* o = options.bytes;
  const int32_t B = args.shape.batch, S = args.shape.seq_len, T = args.shape.kv_seq_len;
  const mha::AttentionShape& shape = args.shape;
  std::mt19937_64 option_rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<int32_t>& kv_lengths = buffers.kv_lengths;
  std::vector<float>& slopes = buffers.slopes;
  std::vector<float>& bias = buffers.bias;
  switch (o[1] % 4) {  // query positions: upper-left, lower-right, up to 255, near the int32 limit
    case 0: break;
    case 1: args.query_offset = std::max(0, T - S); break;
    case 2: args.query_offset = o[2]; break;
    default: args.query_offset = std::numeric_limits<int32_t>::max() - S - o[2]; break;
  }
  if (o[3] % 4 != 0) {
    for (int32_t b = 0; b < B; ++b) {
      const int32_t random = int32_t(option_rng() % uint64_t(T + 1));
      kv_lengths.push_back(o[3] % 4 == 1 ? random : o[3] % 4 == 2 ? 0 : (b % 2 ? T : random));
    }
    args.kv_lengths = kv_lengths.data();
  }
  args.window_left = window_bound(o[4]);
  args.window_right = window_bound(o[5]);
  constexpr float kSoftcaps[] = {0.0f, 0.5f, 5.0f, 30.0f, 1e-30f, 1e30f};
  args.softcap = kSoftcaps[o[6] % 6];
  if (o[7] % 4 != 0) {
    for (int32_t h = 0; h < shape.num_heads; ++h) {
      const double standard = std::exp2(-8.0 * (h + 1) / shape.num_heads);
      const double random = std::uniform_real_distribution<double>(-1.0, 1.0)(option_rng);
      slopes.push_back(float(o[7] % 4 == 1 ? standard : o[7] % 4 == 2 ? random : 1e20 * random));
    }
    args.alibi_slopes = slopes.data();
  }
  if (o[8] % 6 != 0) {
    const int32_t bias_batch = (o[8] % 6 == 1 || o[8] % 6 == 3 || o[8] % 6 == 5) ? B : 1;
    const int32_t bias_heads = (o[8] % 6 == 1 || o[8] % 6 == 4 || o[8] % 6 == 5) ? shape.num_heads : 1;
    const int64_t plane = int64_t{S} * T;
    bias.resize(size_t(bias_batch * bias_heads * plane));
    std::vector<float*> cells;
    for (float& x : bias) cells.push_back(&x);
    fill_values(cells, o[9] % 8, option_rng);
    const uint32_t hidden = (o[9] >> 3) % 4;  // none, 1/8, 1/2 or every bias -inf
    for (float& x : bias) {
      if (hidden == 3 || (hidden == 1 && option_rng() % 8 == 0) || (hidden == 2 && option_rng() % 2 == 0)) x = -kInf;
    }
    if (o[9] & 0x80) bias[option_rng() % bias.size()] = kNaN;
    args.bias = mha::BiasView{bias.data(), bias_batch == 1 ? 0 : bias_heads * plane, bias_heads == 1 ? 0 : plane};
  }
  args.empty_rows = (o[10] & 1) ? mha::EmptyRows::kZero : mha::EmptyRows::kNaN;
}

}  // namespace fuzz
