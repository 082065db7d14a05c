// The fast kernel (src/mha/attention.cpp) against the double-precision reference, its vectorized exp
// against std::exp, and the properties the thread pool relies on (unit order and split do not change a
// bit of the result).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mha/attention.hpp"
#include "mha/reference.hpp"
#include "mha/simd_exp.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class MaskKind { kNone, kRandom, kKeyPadding, kFullyMaskedRows };

// One attention problem with its own buffers. q/k/v can live inside larger buffers (misaligned by
// `offset` floats, rows `row_stride` apart, e.g. a slice of a packed (B, S, 3D) qkv projection).
struct Problem {
  mha::AttentionShape shape;
  bool causal = false;
  float scale = 0.0f;
  int32_t offset = 0;         // extra floats before every tensor (misalignment)
  int32_t row_pad = 0;        // extra floats after every row (non-dense strides)
  std::vector<float> q_buf, k_buf, v_buf;
  std::vector<uint8_t> mask;  // (B, S, T) or empty

  int64_t row_stride() const { return shape.d_model + row_pad; }
  int64_t q_batch_stride() const { return shape.seq_len * row_stride(); }
  int64_t kv_batch_stride() const { return shape.kv_seq_len * row_stride(); }

  float& q(int b, int i, int c) { return q_buf[offset + b * q_batch_stride() + i * row_stride() + c]; }
  float& k(int b, int j, int c) { return k_buf[offset + b * kv_batch_stride() + j * row_stride() + c]; }
  float& v(int b, int j, int c) { return v_buf[offset + b * kv_batch_stride() + j * row_stride() + c]; }

  mha::AttentionArgs args(std::vector<float>& out) const {
    mha::AttentionArgs a;
    a.shape = shape;
    a.q = {q_buf.data() + offset, q_batch_stride(), row_stride()};
    a.k = {k_buf.data() + offset, kv_batch_stride(), row_stride()};
    a.v = {v_buf.data() + offset, kv_batch_stride(), row_stride()};
    out.assign(static_cast<size_t>(shape.q_elements()), -12345.0f);
    a.out = mha::dense_view(out.data(), shape.seq_len, shape.d_model);
    a.mask = mask.empty() ? nullptr : mask.data();
    a.causal = causal;
    a.scale = scale;
    return a;
  }
};

Problem make_problem(mha::AttentionShape shape, uint64_t seed, float input_scale = 1.0f, MaskKind mask_kind = MaskKind::kNone,
                     bool causal = false, int32_t offset = 0, int32_t row_pad = 0) {
  Problem p;
  p.shape = shape;
  p.causal = causal;
  p.scale = mha::default_scale(shape.head_dim());
  p.offset = offset;
  p.row_pad = row_pad;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Padding floats hold NaN: reading outside the described tensors would show up in the output.
  p.q_buf.assign(static_cast<size_t>(offset + shape.batch * p.q_batch_stride()), kNaN);
  p.k_buf.assign(static_cast<size_t>(offset + shape.batch * p.kv_batch_stride()), kNaN);
  p.v_buf.assign(p.k_buf.size(), kNaN);
  for (int b = 0; b < shape.batch; ++b) {
    for (int i = 0; i < shape.seq_len; ++i)
      for (int c = 0; c < shape.d_model; ++c) p.q(b, i, c) = normal(rng) * input_scale;
    for (int j = 0; j < shape.kv_seq_len; ++j)
      for (int c = 0; c < shape.d_model; ++c) p.k(b, j, c) = normal(rng) * input_scale;
    for (int j = 0; j < shape.kv_seq_len; ++j)
      for (int c = 0; c < shape.d_model; ++c) p.v(b, j, c) = normal(rng);
  }
  if (mask_kind != MaskKind::kNone) {
    p.mask.assign(static_cast<size_t>(shape.mask_elements()), 1);
    std::uniform_int_distribution<int> coin(0, 2);
    for (int b = 0; b < shape.batch; ++b) {
      const int valid = std::uniform_int_distribution<int>(1, shape.kv_seq_len)(rng);
      for (int i = 0; i < shape.seq_len; ++i) {
        const bool row_off = mask_kind == MaskKind::kFullyMaskedRows && coin(rng) == 0;
        for (int j = 0; j < shape.kv_seq_len; ++j) {
          uint8_t& m = p.mask[(size_t(b) * shape.seq_len + i) * shape.kv_seq_len + j];
          if (mask_kind == MaskKind::kRandom || mask_kind == MaskKind::kFullyMaskedRows) m = coin(rng) != 0;
          if (mask_kind == MaskKind::kKeyPadding) m = j < valid;
          if (row_off) m = 0;
        }
      }
    }
  }
  return p;
}

struct Outputs {
  std::vector<float> ref, fast;
};

Outputs run_both(const Problem& p) {
  Outputs o;
  REQUIRE(mha::reference_attention(p.args(o.ref)) == mha::Status::kOk);
  mha::Workspace ws;
  REQUIRE(mha::attention(p.args(o.fast), ws) == mha::Status::kOk);
  return o;
}

// |fast - ref| <= tol * max(1, max|ref|) elementwise; NaN exactly where the reference has NaN.
void require_close(const std::vector<float>& ref, const std::vector<float>& fast, float tol) {
  REQUIRE(ref.size() == fast.size());
  float ref_max = 1.0f;
  for (float x : ref)
    if (std::isfinite(x)) ref_max = std::max(ref_max, std::fabs(x));
  size_t bad = 0, first_bad = 0;
  float worst = 0.0f;
  for (size_t n = 0; n < ref.size(); ++n) {
    const bool nan_ref = std::isnan(ref[n]), nan_fast = std::isnan(fast[n]);
    float err = 0.0f;
    if (nan_ref != nan_fast) {
      err = kInf;
    } else if (!nan_ref) {
      err = ref[n] == fast[n] ? 0.0f : std::fabs(ref[n] - fast[n]);
    }
    if (!(err <= tol * ref_max)) {
      if (bad++ == 0) first_bad = n;
    }
    if (std::isfinite(err)) worst = std::max(worst, err);
  }
  INFO("worst finite error " << worst << ", allowed " << tol * ref_max << ", bad elements " << bad
                             << ", first at " << first_bad << " (ref " << (bad ? ref[first_bad] : 0.0f) << ", fast "
                             << (bad ? fast[first_bad] : 0.0f) << ")");
  REQUIRE(bad == 0);
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr float kTol = 1e-5f;

uint32_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return static_cast<uint32_t>(ia > ib ? int64_t{ia} - ib : int64_t{ib} - ia);
}


}  // namespace

// ---------------------------------------------------------------------------------------------------
// Vectorized exp2 (the softmax works in log2 units)

TEST_CASE("simd exp2 (softmax in log2 units): accurate on [-126, 0], +0 below -126.5, NaN kept", "[attention][exp]") {
  const mha::simd::Exp2Constants k;
  auto exp2_lane0 = [&k](float x) { return mha::simd::exp2_nonpositive(mha::simd::VecF(x), k).get(0); };
  uint32_t worst = 0;
  float worst_x = 0.0f;
  for (int n = 0; n <= 2000000; ++n) {
    const float x = mha::simd::kExp2Accurate * static_cast<float>(n) / 2000000.0f;
    const uint32_t d = ulp_distance(exp2_lane0(x), std::exp2(x));
    if (d > worst) { worst = d; worst_x = x; }
  }
  for (float x = -1e-3f; x <= 0.0f; x = std::nextafter(x, 1.0f) + 1e-9f) {
    const uint32_t d = ulp_distance(exp2_lane0(x), std::exp2(x));
    if (d > worst) { worst = d; worst_x = x; }
  }
  INFO("worst " << worst << " ulp at x = " << worst_x);
  REQUIRE(worst <= 3);
  REQUIRE(exp2_lane0(0.0f) == 1.0f);
  REQUIRE(exp2_lane0(-0.0f) == 1.0f);
  REQUIRE(exp2_lane0(-126.0f) == std::exp2(-126.0f));
  for (float x : {-kInf, -126.51f, -126.7f, -127.0f, -127.5f, -128.0f, -1000.0f, -std::numeric_limits<float>::max()}) {
    INFO("x = " << x);
    const float y = exp2_lane0(x);
    REQUIRE(y == 0.0f);
    REQUIRE_FALSE(std::signbit(y));
  }
  // From -126.5 to -126 the result is subnormal and correctly scaled: within a few subnormal steps.
  for (float x = -126.5f; x < -126.0f; x += 0.01f) {
    INFO("x = " << x);
    const float y = exp2_lane0(x);
    REQUIRE(y > 0.0f);
    REQUIRE(y < std::numeric_limits<float>::min());
    REQUIRE(std::fabs(double(y) - std::exp2(double(x))) <= 4 * double(std::numeric_limits<float>::denorm_min()));
  }
  REQUIRE(std::isnan(exp2_lane0(kNaN)));
  REQUIRE(std::isnan(exp2_lane0(-kNaN)));
  // Lanes are independent: -inf and NaN neighbours do not disturb an ordinary lane.
  alignas(16) float in[4] = {-kInf, kNaN, -3.25f, -0.0f};
  alignas(16) float out[4];
  mha::simd::exp2_nonpositive(mha::simd::VecF::load_aligned(in), k).store_aligned(out);
  REQUIRE(out[0] == 0.0f);
  REQUIRE(std::isnan(out[1]));
  REQUIRE(ulp_distance(out[2], std::exp2(-3.25f)) <= 3);
  REQUIRE(out[3] == 1.0f);
}

// ---------------------------------------------------------------------------------------------------
// Fast kernel vs reference

TEST_CASE("attention: random shapes, masks, causal, misaligned and strided buffers match the reference",
          "[attention]") {
  std::mt19937_64 pick(20240611);
  const std::vector<int> head_dims = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 63, 64, 65};
  for (int trial = 0; trial < 240; ++trial) {
    const uint64_t seed = pick();
    std::mt19937_64 rng(seed);
    auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int dh = head_dims[trial % head_dims.size()];
    const int heads = uni(1, 3);
    const int batch = uni(1, 2);
    const int s = uni(1, 70);
    const int t = uni(0, 3) == 0 ? s : uni(1, 70);  // self- and cross-attention
    const auto mask_kind = static_cast<MaskKind>(uni(0, 3));
    const bool causal = uni(0, 2) == 0;
    const int offset = uni(0, 1);
    const int row_pad = uni(0, 1) == 0 ? 0 : uni(1, 2 * dh * heads + 3);
    Problem p = make_problem({batch, s, t, dh * heads, heads}, seed, 1.0f, mask_kind, causal, offset, row_pad);
    if (uni(0, 4) == 0) p.scale = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);  // any finite scale
    INFO("seed " << seed << " B=" << batch << " S=" << s << " T=" << t << " H=" << heads << " Dh=" << dh << " mask="
                 << int(mask_kind) << " causal=" << causal << " offset=" << offset << " row_pad=" << row_pad
                 << " scale=" << p.scale);
    const Outputs o = run_both(p);
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("attention: q/k/v as slices of one packed (B, S, 3D) qkv buffer", "[attention]") {
  const uint64_t seed = 77;
  INFO("seed " << seed);
  const mha::AttentionShape shape{2, 37, 37, 96, 3};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> qkv(size_t(shape.batch) * shape.seq_len * 3 * shape.d_model + 1);
  for (float& x : qkv) x = normal(rng);
  const float* base = qkv.data() + 1;  // misaligned as well
  const int64_t row = 3 * shape.d_model, batch = shape.seq_len * row;
  for (bool causal : {false, true}) {
    mha::AttentionArgs a;
    a.shape = shape;
    a.q = {base, batch, row};
    a.k = {base + shape.d_model, batch, row};
    a.v = {base + 2 * shape.d_model, batch, row};
    a.causal = causal;
    a.scale = mha::default_scale(shape.head_dim());
    std::vector<float> ref(size_t(shape.q_elements())), fast(ref.size());
    a.out = mha::dense_view(ref.data(), shape.seq_len, shape.d_model);
    REQUIRE(mha::reference_attention(a) == mha::Status::kOk);
    a.out = mha::dense_view(fast.data(), shape.seq_len, shape.d_model);
    mha::Workspace ws;
    REQUIRE(mha::attention(a, ws) == mha::Status::kOk);
    require_close(ref, fast, kTol);
  }
}

TEST_CASE("attention: longer sequences cross several key tiles and query blocks", "[attention]") {
  for (const auto& c : {std::make_tuple(1, 200, 333, 128, 2, false, MaskKind::kNone),
                        std::make_tuple(1, 300, 300, 64, 1, true, MaskKind::kNone),
                        std::make_tuple(2, 150, 130, 96, 3, true, MaskKind::kRandom),
                        std::make_tuple(1, 129, 257, 65, 1, false, MaskKind::kKeyPadding),
                        std::make_tuple(1, 260, 70, 48, 2, true, MaskKind::kFullyMaskedRows),
                        // 8 heads: units of 600 rows (10 blocks) against 6 key tiles of 128, causal and masked
                        std::make_tuple(2, 600, 700, 256, 4, true, MaskKind::kRandom)}) {
    const uint64_t seed = 1000 + std::get<1>(c);
    INFO("seed " << seed << " S=" << std::get<1>(c) << " T=" << std::get<2>(c) << " D=" << std::get<3>(c));
    const Problem p = make_problem({std::get<0>(c), std::get<1>(c), std::get<2>(c), std::get<3>(c), std::get<4>(c)}, seed,
                                   1.0f, std::get<6>(c), std::get<5>(c));
    const Outputs o = run_both(p);
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("attention: fully masked rows are NaN, the other rows are untouched by them", "[attention]") {
  Problem p = make_problem({2, 9, 11, 12, 3}, 5, 1.0f, MaskKind::kRandom);
  for (int j = 0; j < 11; ++j) p.mask[(0 * 9 + 4) * 11 + j] = 0;  // row (b=0, i=4) sees nothing
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 11; ++j) p.mask[(1 * 9 + i) * 11 + j] = 0;  // batch 1 sees nothing at all
  const Outputs o = run_both(p);
  for (int c = 0; c < 12; ++c) REQUIRE(std::isnan(o.fast[4 * 12 + c]));
  for (size_t n = 9 * 12; n < o.fast.size(); ++n) REQUIRE(std::isnan(o.fast[n]));
  require_close(o.ref, o.fast, kTol);
}

TEST_CASE("attention: rows that see nothing in the first key tiles but something later", "[attention]") {
  // Other rows of the same query block do see the early keys, so those tiles are processed while these
  // rows still have no running max (exp(-inf - -inf) must not turn into NaN).
  Problem p = make_problem({1, 20, 150, 16, 1}, 61, 1.0f, MaskKind::kRandom);
  for (int i = 0; i < 20; i += 2)
    for (int j = 0; j < 140; ++j) p.mask[size_t(i) * 150 + j] = 0;
  p.mask[size_t(4) * 150 + 149] = 0;
  for (int j = 140; j < 149; ++j) p.mask[size_t(4) * 150 + j] = 0;  // row 4 sees nothing at all
  const Outputs o = run_both(p);
  for (int c = 0; c < 16; ++c) REQUIRE(std::isnan(o.fast[4 * 16 + c]));
  for (int i = 0; i < 20; ++i)
    if (i != 4) REQUIRE(std::isfinite(o.fast[i * 16]));
  require_close(o.ref, o.fast, kTol);
}

TEST_CASE("attention: causal with S < T and S > T, alone and with a mask", "[attention]") {
  for (auto st : {std::make_pair(5, 40), std::make_pair(40, 5), std::make_pair(70, 69), std::make_pair(1, 70)}) {
    for (MaskKind mk : {MaskKind::kNone, MaskKind::kRandom, MaskKind::kKeyPadding}) {
      const uint64_t seed = 31 * st.first + st.second;
      INFO("seed " << seed << " S=" << st.first << " T=" << st.second << " mask " << int(mk));
      const Problem p = make_problem({2, st.first, st.second, 16, 2}, seed, 1.0f, mk, true);
      const Outputs o = run_both(p);
      require_close(o.ref, o.fast, kTol);
    }
  }
}

TEST_CASE("attention: non-finite inputs", "[attention]") {
  const mha::AttentionShape shape{1, 12, 20, 16, 2};
  SECTION("NaN in q poisons exactly that row of that head") {
    Problem p = make_problem(shape, 11);
    p.q(0, 3, 9) = kNaN;  // head 1
    const Outputs o = run_both(p);
    for (int c = 8; c < 16; ++c) REQUIRE(std::isnan(o.fast[3 * 16 + c]));
    for (int c = 0; c < 8; ++c) REQUIRE(std::isfinite(o.fast[3 * 16 + c]));
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("NaN or inf in a visible key poisons every row that sees it") {
    for (float bad : {kNaN, kInf, -kInf}) {
      INFO("bad value " << bad);
      Problem p = make_problem(shape, 12, 1.0f, MaskKind::kNone, true);
      p.k(0, 7, 2) = bad;  // head 0, key 7: seen by rows >= 7 only
      const Outputs o = run_both(p);
      require_close(o.ref, o.fast, kTol);
      for (int i = 0; i < 7; ++i) REQUIRE(std::isfinite(o.fast[i * 16]));
    }
  }
  SECTION("NaN in a visible value poisons that column only") {
    Problem p = make_problem(shape, 13);
    p.v(0, 5, 3) = kNaN;
    const Outputs o = run_both(p);
    for (int i = 0; i < 12; ++i) {
      REQUIRE(std::isnan(o.fast[i * 16 + 3]));
      REQUIRE(std::isfinite(o.fast[i * 16 + 4]));
    }
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("inf/NaN in k and v behind the mask or the causal edge never leak") {
    Problem p = make_problem(shape, 14, 1.0f, MaskKind::kKeyPadding, true);
    for (int c = 0; c < 16; ++c) {
      p.k(0, 19, c) = kNaN;  // hide key 19 from everyone via the mask
      p.v(0, 19, c) = c % 2 ? kInf : kNaN;
      p.v(0, 11, c) = -kInf;  // key 11 is visible (if the padding allows) only to row 11 (causal)
    }
    for (int i = 0; i < 12; ++i) p.mask[size_t(i) * 20 + 19] = 0;
    for (int i = 0; i < 12; ++i) p.mask[size_t(i) * 20 + 0] = 1;  // every row sees key 0
    const Outputs o = run_both(p);
    for (int i = 0; i < 11; ++i)
      for (int c = 0; c < 16; ++c) REQUIRE(std::isfinite(o.fast[i * 16 + c]));
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("attention: huge logits stay finite and correct (max subtraction)", "[attention]") {
  SECTION("q, k ~ 1e3: softmax is one-hot, exp(score) alone would overflow") {
    const Problem p = make_problem({2, 33, 41, 64, 2}, 21, 1e3f);
    const Outputs o = run_both(p);
    for (float x : o.fast) REQUIRE(std::isfinite(x));
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("every score near +1000 with O(1) differences") {
    Problem p = make_problem({1, 20, 30, 32, 1}, 22);
    for (int j = 0; j < 30; ++j) p.k(0, j, 0) = 1000.0f / p.scale;  // q[0] = 1 below: score += 1000
    for (int i = 0; i < 20; ++i) p.q(0, i, 0) = 1.0f;
    const Outputs o = run_both(p);
    for (float x : o.fast) REQUIRE(std::isfinite(x));
    // A float score near 1000 carries an absolute error of ~1000 * eps * few, which moves the weights by
    // as much relative; PyTorch float32 has the same. Allow 1000 * 2^-23 * 32.
    require_close(o.ref, o.fast, 1000.0f * 32.0f * std::numeric_limits<float>::epsilon());
  }
}

TEST_CASE("attention: all-equal logits give the mean of V; seq 1 gives V itself", "[attention]") {
  Problem p = make_problem({1, 7, 45, 24, 2}, 23);
  for (int i = 0; i < 7; ++i)
    for (int c = 0; c < 24; ++c) p.q(0, i, c) = 0.0f;
  const Outputs o = run_both(p);
  for (int c = 0; c < 24; ++c) {
    double mean = 0.0;
    for (int j = 0; j < 45; ++j) mean += p.v(0, j, c);
    mean /= 45.0;
    for (int i = 0; i < 7; ++i) REQUIRE(std::fabs(o.fast[i * 24 + c] - mean) <= 1e-5 * std::max(1.0, std::fabs(mean)));
  }

  const Problem one = make_problem({3, 1, 1, 20, 4}, 24);
  const Outputs o1 = run_both(one);
  Problem& mut = const_cast<Problem&>(one);
  for (int b = 0; b < 3; ++b)
    for (int c = 0; c < 20; ++c) REQUIRE(o1.fast[b * 20 + c] == mut.v(b, 0, c));  // p = exp(0) = 1, l = 1: exact
}

// ---------------------------------------------------------------------------------------------------
// Units: order, split, scratch

TEST_CASE("attention: units in shuffled order and in other splits give bit-identical results", "[attention][units]") {
  for (uint64_t seed : {31u, 32u, 33u}) {
    INFO("seed " << seed);
    const bool causal = seed != 32;
    // seed 33: several key tiles (T = 290) as well as several blocks per unit
    const Problem p = make_problem({2, 150, seed == 33 ? 290 : 90, 40, 4}, seed, 1.0f,
                                   seed == 33 ? MaskKind::kRandom : MaskKind::kNone, causal);
    std::vector<float> whole, shuffled, resplit;
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(whole), ws) == mha::Status::kOk);

    mha::AttentionArgs a = p.args(shuffled);
    const int64_t n = mha::attention_unit_count(p.shape);
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t u = 0; u < n; ++u) order[size_t(u)] = u;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    std::vector<float> scratch_buf(mha::attention_scratch_floats(p.shape) + 16);
    float* scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_buf.data()) + 63) / 64 * 64);
    for (int64_t u : order) {
      // Dirty scratch between units: a unit must not depend on what the previous one left there.
      std::fill(scratch, scratch + mha::attention_scratch_floats(p.shape), kNaN);
      mha::attention_run_unit(a, mha::attention_unit(p.shape, u), scratch);
    }
    REQUIRE(bit_equal(whole, shuffled));

    // Blocks of 1, 2, 3, ... rows (never more than rows_per_unit): every row still sees the same floats.
    a = p.args(resplit);
    const int32_t max_rows = mha::attention_rows_per_unit(p.shape);
    for (int32_t b = 0; b < p.shape.batch; ++b)
      for (int32_t h = 0; h < p.shape.num_heads; ++h) {
        int32_t size = 1;
        for (int32_t i = 0; i < p.shape.seq_len; i += size, size = size % max_rows + 1) {
          mha::WorkUnit unit{b, h, i, std::min(i + size, p.shape.seq_len)};
          mha::attention_run_unit(a, unit, scratch);
        }
      }
    REQUIRE(bit_equal(whole, resplit));
  }
}

// Runs attention with out = q itself (same buffer and strides) and returns the result, read back from
// the q buffer in dense (B, S, D) order.
std::vector<float> attention_into_q(const Problem& p, mha::Workspace& ws) {
  std::vector<float> unused;
  Problem in_place = p;  // its own copy of q, overwritten by the result
  mha::AttentionArgs a = in_place.args(unused);
  float* q = in_place.q_buf.data() + in_place.offset;
  a.out = {q, in_place.q_batch_stride(), in_place.row_stride()};
  REQUIRE(mha::attention(a, ws) == mha::Status::kOk);
  std::vector<float> result;
  for (int b = 0; b < p.shape.batch; ++b)
    for (int i = 0; i < p.shape.seq_len; ++i)
      for (int c = 0; c < p.shape.d_model; ++c) result.push_back(in_place.q(b, i, c));
  return result;
}

TEST_CASE("attention: out may be q itself, with the bits of a separate out", "[attention][units]") {
  mha::Workspace ws;
  SECTION("several units and key tiles, masks with fully hidden rows, causal, strided and misaligned q") {
    for (uint64_t seed : {41u, 42u, 43u}) {
      INFO("seed " << seed);
      const Problem p = make_problem({2, 150, 290, 40, 4}, seed, 1.0f, seed == 42 ? MaskKind::kFullyMaskedRows : MaskKind::kRandom,
                                     seed != 41, seed == 43 ? 3 : 0, seed == 43 ? 5 : 0);
      std::vector<float> separate;
      REQUIRE(mha::attention(p.args(separate), ws) == mha::Status::kOk);
      REQUIRE(bit_equal(attention_into_q(p, ws), separate));
    }
  }
  SECTION("rows redone by the reference (non-finite q, overflowing logits) read q before it is overwritten") {
    Problem p = make_problem({1, 70, 90, 32, 2}, 44);
    p.q(0, 5, 3) = kNaN;        // head 0 of row 5: NaN
    p.q(0, 9, 20) = 3e38f;      // head 1 of row 9: q.k overflows to inf
    p.q(0, 66, 1) = kInf;
    std::vector<float> separate;
    REQUIRE(mha::attention(p.args(separate), ws) == mha::Status::kOk);
    const std::vector<float> in_q = attention_into_q(p, ws);
    REQUIRE(std::isnan(separate[5 * 32 + 3]));
    REQUIRE(bit_equal(in_q, separate));
  }
  SECTION("a scale the kernel cannot fold runs on the reference, row by row, also in place") {
    Problem p = make_problem({2, 20, 30, 24, 3}, 45, 1.0f, MaskKind::kRandom, true);
    p.scale = 3e-39f;  // subnormal once log2(e) is folded in
    std::vector<float> separate;
    REQUIRE(mha::attention(p.args(separate), ws) == mha::Status::kOk);
    REQUIRE(bit_equal(attention_into_q(p, ws), separate));
  }
}

TEST_CASE("attention: units cover every (batch, head, row) exactly once", "[attention][units]") {
  for (const mha::AttentionShape& shape : {mha::AttentionShape{2, 5, 5, 12, 3}, mha::AttentionShape{3, 200, 7, 64, 4},
                                           mha::AttentionShape{1, 64, 64, 8, 1}, mha::AttentionShape{1, 65, 1, 8, 2}}) {
    std::vector<int> seen(size_t(shape.batch) * shape.num_heads * shape.seq_len, 0);
    const int64_t n = mha::attention_unit_count(shape);
    for (int64_t u = 0; u < n; ++u) {
      const mha::WorkUnit unit = mha::attention_unit(shape, u);
      REQUIRE(unit.q_begin < unit.q_end);
      REQUIRE(unit.q_end - unit.q_begin <= mha::attention_rows_per_unit(shape));
      for (int i = unit.q_begin; i < unit.q_end; ++i) ++seen[(size_t(unit.batch) * shape.num_heads + unit.head) * shape.seq_len + i];
    }
    for (int x : seen) REQUIRE(x == 1);
  }
}

TEST_CASE("attention: scratch does not grow with S or T", "[attention][units]") {
  const size_t small = mha::attention_scratch_floats({1, 8, 8, 768, 12});
  const size_t big = mha::attention_scratch_floats({1, 100000, 200000, 768, 12});
  const size_t mid = mha::attention_scratch_floats({4, 2048, 2048, 768, 12});
  REQUIRE(big == mid);
  REQUIRE(small <= big);
  REQUIRE(big < 160 * 1024);  // a fixed tile: under 640 KiB per worker at Dh = 64 (1024 rows of Q and O)
}

TEST_CASE("attention: numHeads = 1 on per-head copies equals the multi-head kernel bit for bit", "[attention]") {
  for (bool causal : {false, true}) {
    const Problem p = make_problem({2, 67, 45, 3 * 20, 3}, 41, 1.0f, MaskKind::kRandom, causal, 1, 5);
    std::vector<float> multi;
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(multi), ws) == mha::Status::kOk);
    Problem& mp = const_cast<Problem&>(p);
    for (int h = 0; h < 3; ++h) {
      Problem single = make_problem({2, 67, 45, 20, 1}, 0);
      single.mask = p.mask;
      single.causal = causal;
      single.scale = p.scale;
      for (int b = 0; b < 2; ++b) {
        for (int i = 0; i < 67; ++i)
          for (int c = 0; c < 20; ++c) single.q(b, i, c) = mp.q(b, i, h * 20 + c);
        for (int j = 0; j < 45; ++j)
          for (int c = 0; c < 20; ++c) {
            single.k(b, j, c) = mp.k(b, j, h * 20 + c);
            single.v(b, j, c) = mp.v(b, j, h * 20 + c);
          }
      }
      std::vector<float> one;
      REQUIRE(mha::attention(single.args(one), ws) == mha::Status::kOk);
      for (int b = 0; b < 2; ++b)
        for (int i = 0; i < 67; ++i)
          REQUIRE(std::memcmp(&one[(size_t(b) * 67 + i) * 20], &multi[(size_t(b) * 67 + i) * 60 + h * 20], 20 * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("attention: reports bad arguments as status values", "[attention]") {
  Problem p = make_problem({1, 3, 3, 4, 2}, 51);
  std::vector<float> out;
  mha::Workspace ws;
  mha::AttentionArgs a = p.args(out);
  a.scale = kNaN;
  REQUIRE(mha::attention(a, ws) == mha::Status::kBadScale);
  a = p.args(out);
  a.v.data = nullptr;
  REQUIRE(mha::attention(a, ws) == mha::Status::kNullPointer);
  a = p.args(out);
  a.shape.num_heads = 3;
  REQUIRE(mha::attention(a, ws) == mha::Status::kHeadsDoNotDivide);
}

// ---------------------------------------------------------------------------------------------------
// PyTorch golden vectors: |ours - out64| <= max(1e-5 * max(1, max|out64|), 2 * max|out32 - out64|)

namespace {

std::vector<float> read_golden(const std::string& file, size_t count) {
  std::ifstream in(std::string(MHA_GOLDEN_DIR) + "/" + file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() == count * sizeof(float));
  std::vector<float> values(count);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

}  // namespace

TEST_CASE("attention: PyTorch golden cases within the golden tolerance", "[attention][golden]") {
  struct Case {
    const char* name;
    mha::AttentionShape shape;
    bool mask;
  };
  const Case cases[] = {
      {"example_b2_s5_d12_h3", {2, 5, 5, 12, 3}, false},
      {"heads1_b2_s5_d12_h1", {2, 5, 5, 12, 1}, false},
      {"heads12_b2_s5_d12_h12", {2, 5, 5, 12, 12}, false},
      {"random_mask_b2_s6_d12_h3", {2, 6, 6, 12, 3}, true},
      {"causal_mask_b2_s8_d16_h4", {2, 8, 8, 16, 4}, true},
      {"key_padding_b3_s7_d12_h2", {3, 7, 7, 12, 2}, true},
      {"fully_masked_rows_b2_s5_d12_h3", {2, 5, 5, 12, 3}, true},
      {"cross_attn_b2_q7_kv19_d12_h3", {2, 7, 19, 12, 3}, false},
      {"cross_attn_mask_b2_q7_kv19_d12_h3", {2, 7, 19, 12, 3}, true},
      {"head_dim6_b2_s9_d30_h5", {2, 9, 9, 30, 5}, false},
      {"head_dim7_b2_s6_d21_h3", {2, 6, 6, 21, 3}, false},
      {"seq1_b2_s1_d12_h3", {2, 1, 1, 12, 3}, false},
      {"batch1_b1_s5_d12_h3", {1, 5, 5, 12, 3}, false},
      {"large_logits_b2_s8_d16_h4", {2, 8, 8, 16, 4}, false},
      {"large_logits_shift_b2_s8_d16_h4", {2, 8, 8, 16, 4}, false},
      {"realistic_b1_s128_d768_h12", {1, 128, 128, 768, 12}, false},
      {"realistic_b2_s64_d256_h8", {2, 64, 64, 256, 8}, false},
      {"long_b1_s512_d96_h2", {1, 512, 512, 96, 2}, false},
  };
  mha::Workspace ws;
  for (const Case& c : cases) {
    INFO("case " << c.name);
    const std::string n = c.name;
    const auto q = read_golden(n + ".q.f32", size_t(c.shape.q_elements()));
    const auto k = read_golden(n + ".k.f32", size_t(c.shape.kv_elements()));
    const auto v = read_golden(n + ".v.f32", size_t(c.shape.kv_elements()));
    const auto out64 = read_golden(n + ".out64.f32", size_t(c.shape.q_elements()));
    const auto out32 = read_golden(n + ".out32.f32", size_t(c.shape.q_elements()));
    std::vector<uint8_t> mask;
    if (c.mask) {
      std::ifstream in(std::string(MHA_GOLDEN_DIR) + "/" + n + ".mask.u8", std::ios::binary);
      mask.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      REQUIRE(mask.size() == size_t(c.shape.mask_elements()));
    }
    std::vector<float> out(out64.size());
    mha::AttentionArgs a;
    a.shape = c.shape;
    a.q = mha::dense_view(q.data(), c.shape.seq_len, c.shape.d_model);
    a.k = mha::dense_view(k.data(), c.shape.kv_seq_len, c.shape.d_model);
    a.v = mha::dense_view(v.data(), c.shape.kv_seq_len, c.shape.d_model);
    a.out = mha::dense_view(out.data(), c.shape.seq_len, c.shape.d_model);
    a.mask = c.mask ? mask.data() : nullptr;
    a.scale = mha::default_scale(c.shape.head_dim());
    REQUIRE(mha::attention(a, ws) == mha::Status::kOk);
    float max64 = 1.0f, torch_err = 0.0f, our_err = 0.0f;
    for (size_t i = 0; i < out.size(); ++i) {
      REQUIRE(std::isnan(out[i]) == std::isnan(out64[i]));
      if (std::isnan(out64[i])) continue;
      max64 = std::max(max64, std::fabs(out64[i]));
      torch_err = std::max(torch_err, std::fabs(out32[i] - out64[i]));
      our_err = std::max(our_err, std::fabs(out[i] - out64[i]));
    }
    const float tol = std::max(1e-5f * max64, 2.0f * torch_err);
    INFO("our max error " << our_err << ", PyTorch float32 " << torch_err << ", tolerance " << tol);
    REQUIRE(our_err <= tol);
  }
}

// ---------------------------------------------------------------------------------------------------
// Sequences whose S x T passes 2^31: without a mask no (S, T) tensor exists, so they are accepted.

TEST_CASE("attention: S * T beyond 2^31 without a mask runs (tiles only); with a mask it is too large",
          "[attention][validation]") {
  // 46341^2 = 2,147,488,281 > 2^31 - 1; causal halves the work (about 1.07e9 query-key pairs).
  const Problem p = make_problem({1, 46341, 46341, 2, 2}, 91, 1.0f, MaskKind::kNone, /*causal=*/true);
  std::vector<float> fast, ref;
  mha::AttentionArgs args = p.args(fast);
  mha::Workspace workspace;
  REQUIRE(mha::attention(args, workspace) == mha::Status::kOk);
  mha::AttentionArgs ref_args = p.args(ref);
  for (int32_t row : {0, 1, 777, 23170, 46339, 46340}) {
    INFO("row " << row);
    mha::reference_attention_query(ref_args, 0, 0, row);
    mha::reference_attention_query(ref_args, 0, 1, row);
    for (int32_t c = 0; c < 2; ++c) {
      const float f = fast[size_t(row) * 2 + c], r = ref[size_t(row) * 2 + c];
      REQUIRE(std::isfinite(f));
      REQUIRE(std::fabs(f - r) <= kTol * (1.0f + std::fabs(r)));
    }
  }
  // Row 0 sees only key 0: its output is v[0] exactly, per head.
  REQUIRE(fast[0] == p.v_buf[0]);
  REQUIRE(fast[1] == p.v_buf[1]);
  // A mask would be a (B, S, T) tensor of 2^31 bytes or more: refused before any memory is touched.
  const uint8_t any_byte = 1;
  args.mask = &any_byte;
  REQUIRE(mha::attention(args, workspace) == mha::Status::kTooLarge);
}
