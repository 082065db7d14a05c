// Differential fuzzing of every kernel variant of the build (mha::kernel_variants(): simd128 and scalar)
// against the double-precision reference (mha::reference_attention), under ASan + UBSan. Built by the CMake option MHA_FUZZ (clang only);
// run with `npm run fuzz` (scripts/fuzz.sh) or the short fixed-seed slice in scripts/test.sh.
//
// Input layout (tests/fuzz/README.md describes it for corpus authors): a header of shape/config bytes,
// an 8-byte seed for the bulk values, then any number of 4-byte "injections" that put special values
// (NaN, +-inf, denormals, +-0, FLT_MAX, 1e30, ...) at chosen positions of q, k, v or flip mask bytes.
//
// What one input checks, for each kernel variant:
//   1. no crash, no ASan/UBSan report; inputs are allocated with their exact extent and the gaps of
//      strided buffers hold NaN, so an out-of-bounds or gap read shows up;
//   2. neither kernel writes outside the output's (B, S, D) elements (gap sentinels unchanged);
//   3. the kernel's scratch is poisoned with NaN before the call (reads of stale scratch show);
//   4. running the work units in reverse order gives a bit-identical output;
//   5. merge_heads(split_heads(q)) == q bit for bit;
//   6. per output element, fast vs reference:
//        - same class: NaN, +inf, -inf or finite (so NaN positions and infinities are identical);
//        - both finite: |fast - ref| <= tol, the bound derived below;
//      except in the "float32 range" cases listed under `Domain`, which are documented limits of a
//      float32 kernel (README, Guarantees) and are counted, not failed.
//
// Tolerance (u = 2^-24, the float32 unit roundoff; all sums over the keys j visible to the row):
//   a_j = sum_d |q_d k_jd|, A = |scale| * max_j a_j       (bounds every |logit|)
//   The float logit carries an absolute error e_j <= (Dh + 5) u A  (Dh-term dot product; the scale
//   rounded once more when log2(e) is folded into it, then the multiply; the subtraction of the running
//   max; log2(e) itself), the vectorized 2^x a relative error of a few ulp, and every online-softmax
//   rescale one more exp: E = 2 * ((Dh + 5) u A + (tiles + 2) * 4u).
//   Softmax is shift invariant, so a logit error e_j moves weight w_j by a factor in [e^-2E, e^2E]:
//     |sum_j (w'_j - w_j) v_j| <= expm1(2E) * V1,   V1 = sum_j w_j |v_jd|  (reference weights).
//   Float accumulation of P V and of l over T terms adds 2 gamma_T e^2E V1 (gamma_T = T u / (1 - T u)),
//   the final division and rounding 4u V1, the exp flushing weights below 2^-126.5 to 0 at most T 2^-126 max|v|,
//   products and sums in the denormal range (T + 2) 2^-149 absolutely.
//   The bound is then capped by the convex-hull bound: both results are convex combinations of the
//   visible v_jd, so |fast - ref| <= (max v - min v) + (the same rounding terms): that keeps the check
//   meaningful when the logits are huge and E is large (then only "lies within V's range" is checked).
//   From 2E >= 700 on, only the hull is used: V1's double weights underflow to 0 beyond e^-745, so a key
//   whose float32 logit error lifts it to the top would be missing from V1.
//
// Domain: rows whose float32 intermediates can overflow although the double reference does not
//   (a) logit overflow: max_j a_j or A >= FLT_MAX / 4: q.k (or scale * q.k) is not representable in
//       float32; the kernel sees +-inf logits (so NaN or a different winner) where the reference
//       computes in double. PyTorch float32 behaves like the kernel. Counted as `logit_range`.
//   (b) accumulation overflow: T * max_j |v_jd| >= FLT_MAX / 4 (finite v_jd): the unnormalized online-softmax
//       accumulator sum_j p_j v_jd (p_j <= 1) can overflow to inf before the final division by l.
//       Counted as `value_range`.
//   (c) weight underflow (see the check below): an infinite v at a key whose weight is 0 in one
//       precision and positive in the other: NaN vs +-inf. Counted as `weight_underflow`. MHA_FUZZ_STRICT=1 turns (a), (b) and (c) into failures.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/kernel.hpp"
#include "mha/heads.hpp"
#include "mha/reference.hpp"
#include "mha/shape.hpp"
#include "mha/visibility.hpp"
#include "mha/workspace.hpp"

namespace {

// Reads the input front to back (unlike FuzzedDataProvider, whose integers come from the end), so the
// corpus files read in the order documented above; past the end every read gives 0.
struct Reader {
  const uint8_t* data;
  size_t size, pos = 0;
  size_t remaining_bytes() const { return size - pos; }
  uint8_t u8() { return pos < size ? data[pos++] : 0; }
  uint16_t u16() { return uint16_t(u8() | u8() << 8); }
  uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
  uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
  float f32() {
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr double kU = 1.0 / (1 << 24);  // float32 unit roundoff
constexpr uint32_t kSentinelBits = 0x7fc0dead;  // a NaN with a recognizable payload

float sentinel() {
  float f;
  std::memcpy(&f, &kSentinelBits, sizeof f);
  return f;
}
bool is_sentinel(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits == kSentinelBits;
}

// A strided (B, rows, D) tensor in a buffer of exactly the size it needs (plus a leading offset), so
// ASan reports any read past its last element. Gap elements (row and batch padding) hold the sentinel.
struct Strided {
  std::vector<float> storage;  // exact extent: offset + (B-1)*batch_stride + (rows-1)*row_stride + D
  int32_t offset = 0;
  int64_t row_stride = 0, batch_stride = 0;
  int32_t batch = 0, rows = 0, d = 0;

  Strided(int32_t b, int32_t r, int32_t dm, int32_t off, int32_t row_pad, int32_t batch_pad)
      : offset(off), row_stride(dm + row_pad), batch_stride(int64_t{r} * (dm + row_pad) + batch_pad), batch(b), rows(r), d(dm) {
    const size_t extent = size_t(off) + size_t((b - 1) * batch_stride + (r - 1) * row_stride + dm);
    storage.assign(extent, sentinel());
  }
  float& at(int32_t b, int32_t r, int32_t c) { return storage[size_t(offset + b * batch_stride + r * row_stride + c)]; }
  float at(int32_t b, int32_t r, int32_t c) const { return storage[size_t(offset + b * batch_stride + r * row_stride + c)]; }
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

const char* g_kernel_name = "";  // the variant being checked, for failure messages

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_attention: FAILED (kernel %s): %s\n", g_kernel_name, what);
  std::fflush(stderr);
  __builtin_trap();
}

int value_class(float x) { return std::isnan(x) ? 0 : std::isinf(x) ? (x > 0 ? 1 : 2) : 3; }

// Values of one tensor: the class byte picks a distribution, the PRNG the values.
void fill_values(std::vector<float*>& cells, uint8_t kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-149, 127);
  const float constant = normal(rng);
  for (float* cell : cells) {
    float x = 0.0f;
    switch (kind % 8) {
      case 0: case 1: x = normal(rng); break;                              // ordinary
      case 2: x = normal(rng) * 30.0f; break;                              // logits near exp's range
      case 3: x = std::ldexp(normal(rng), std::uniform_int_distribution<int>(-30, 30)(rng)); break;  // wide
      case 4: x = std::ldexp(1.0f + std::abs(normal(rng)), exponent(rng)) * (rng() & 1 ? 1.f : -1.f); break;
      case 5: x = constant; break;                                         // all equal
      case 6: x = std::ldexp(normal(rng), -140); break;                    // denormals
      case 7: x = normal(rng) * 1e9f; break;                               // huge: one-hot softmax, large E
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
    case 0: case 1: case 2: return mha::default_scale(head_dim);
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

struct Counters {
  uint64_t inputs = 0, outputs = 0, logit_range = 0, value_range = 0, weight_underflow = 0;
  ~Counters() {
    if (std::getenv("MHA_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr, "fuzz_attention: %llu inputs, %llu outputs compared; float32-range exemptions: %llu logit, %llu value, %llu weight underflow\n",
                   (unsigned long long)inputs, (unsigned long long)outputs, (unsigned long long)logit_range,
                   (unsigned long long)value_range, (unsigned long long)weight_underflow);
    }
  }
};
Counters g_counters;
mha::Workspace g_workspace;  // reused across inputs, as the wasm binding reuses its scratch

struct KernelOutput {
  const char* kernel;  // the variant's name
  Strided out;
};

// Check 6 for every variant's output: per row the reference weights in double, the tolerance terms, then
// every column of each output.
void compare_with_reference(const mha::AttentionArgs& args, const Strided& q, const Strided& k, const Strided& v,
                            const std::vector<KernelOutput>& outputs, const Strided& ref,
                            const std::vector<uint8_t>& mask, float scale, int32_t Dh) {
  const mha::AttentionShape& shape = args.shape;
  const int32_t B = shape.batch, S = shape.seq_len, T = shape.kv_seq_len, D = shape.d_model;
  const bool causal = args.causal, with_mask = !mask.empty();
  const bool strict = std::getenv("MHA_FUZZ_STRICT") != nullptr;
  const int32_t tiles = (T + 63) / 64;
  const double gamma_t = T * kU / (1 - T * kU);
  std::vector<double> logits(size_t(T), 0.0), weights(size_t(T), 0.0);
  std::vector<uint8_t> visible(size_t(T), 0);
  for (int32_t b = 0; b < B; ++b) {
    const mha::KeyVisibility visibility = mha::key_visibility(args, b);
    for (int32_t h = 0; h < shape.num_heads; ++h) {
      for (int32_t i = 0; i < S; ++i) {
        bool row_finite = true;
        double a_max = 0.0, m = -INFINITY;
        for (int32_t j = 0; j < T; ++j) {
          visible[j] = visibility.visible(i, j);
          if (!visible[j]) continue;
          double dot = 0.0, a = 0.0;
          for (int32_t e = 0; e < Dh; ++e) {
            const double qe = q.at(b, i, h * Dh + e), ke = k.at(b, j, h * Dh + e);
            if (!std::isfinite(qe) || !std::isfinite(ke)) row_finite = false;
            dot += qe * ke;
            if (std::isfinite(qe * ke)) a += std::abs(qe * ke);  // finite terms: can their float sum overflow?
          }
          logits[j] = dot * double(scale);
          a_max = std::max(a_max, a);
          if (logits[j] > m) m = logits[j];
        }
        double sum = 0.0;
        for (int32_t j = 0; j < T; ++j) {
          weights[j] = visible[j] ? std::exp(logits[j] - m) : 0.0;
          sum += weights[j];
        }
        for (int32_t j = 0; j < T; ++j) weights[j] /= sum;
        const double A = std::abs(double(scale)) * a_max;
        const bool logit_range = (a_max >= kFltMax / 4.0 || A >= kFltMax / 4.0);
        const double E = 2.0 * ((Dh + 5) * kU * A + (tiles + 2) * 4.0 * kU +
                                std::abs(double(scale)) * Dh * std::ldexp(1.0, -149));

        for (int32_t e = 0; e < Dh; ++e) {
          const int32_t c = h * Dh + e;
          const float r = ref.at(b, i, c);
          double v1 = 0.0, vmin = INFINITY, vmax = -INFINITY, vabs = 0.0, vabs_finite = 0.0;
          bool col_finite = true;
          for (int32_t j = 0; j < T; ++j) {
            if (!visible[j]) continue;
            const double x = v.at(b, j, c);
            if (!std::isfinite(x)) col_finite = false;
            v1 += weights[j] * std::abs(x);
            vmin = std::min(vmin, x);
            vmax = std::max(vmax, x);
            vabs = std::max(vabs, std::abs(x));
            if (std::isfinite(x)) vabs_finite = std::max(vabs_finite, std::abs(x));
          }
          const bool value_range = T * vabs_finite >= kFltMax / 4.0;
          for (const KernelOutput& output : outputs) {
            g_kernel_name = output.kernel;
            const float f = output.out.at(b, i, c);
            ++g_counters.outputs;
            if (!strict && (logit_range || value_range)) {
              if (value_class(f) != value_class(r) || (std::isfinite(f) && std::abs(double(f) - r) > vmax - vmin + 1e-6 * vabs)) {
                g_counters.logit_range += logit_range;
                g_counters.value_range += value_range && !logit_range;
              }
              continue;
            }
            if (((std::isnan(f) && std::isinf(r)) || (std::isinf(f) && std::isnan(r))) && !strict) {
              // (c) weight underflow: an infinite v_jd at a visible key whose weight is 0 on one side and
              // positive on the other, so one side computes 0 * inf = NaN and the other +-inf.
              //   fast NaN, reference +-inf: the logit is more than 87.3 below the row max (within the
              //   logit error E), where the kernel's float32 exp flushes to 0 (PyTorch float32 beyond
              //   ~104); the double weight is tiny but positive.
              //   fast +-inf, reference NaN: the double weight is exactly 0 (gap beyond ~745) but the float
              //   logits, carrying an error E > 650 (|logits| ~ 1e30), can tie, giving a positive weight.
              // Mathematically the weight is positive, so +-inf is the exact answer. Counted as
              // `weight_underflow`.
              bool underflow = false;
              for (int32_t j = 0; j < T; ++j) {
                if (!visible[j] || !std::isinf(v.at(b, j, c))) continue;
                const double gap = m - logits[j];
                underflow |= std::isnan(f) ? gap > 87.3 - E : (weights[j] == 0.0 && gap < 87.3 + E);
              }
              if (underflow) {
                ++g_counters.weight_underflow;
                continue;
              }
            }
            if (value_class(f) != value_class(r)) {
              std::fprintf(stderr,
                           "b=%d h=%d i=%d e=%d B=%d S=%d T=%d D=%d H=%d causal=%d mask=%d scale=%g: fast=%g ref=%g "
                           "(row inputs finite=%d, v column finite=%d)\n",
                           b, h, i, e, B, S, T, D, shape.num_heads, causal, with_mask, double(scale), double(f),
                           double(r), row_finite, col_finite);
              if (std::getenv("MHA_FUZZ_VERBOSE")) {
                for (int32_t j = 0; j < T; ++j) {
                  std::fprintf(stderr, "  key %d visible=%d logit=%g v=%g:", j, visible[j], logits[j], double(v.at(b, j, c)));
                  for (int32_t x = 0; x < Dh; ++x) std::fprintf(stderr, " %g*%g", double(q.at(b, i, h * Dh + x)), double(k.at(b, j, h * Dh + x)));
                  std::fprintf(stderr, "\n");
                }
              }
              fail("fast and reference differ in NaN/inf class");
            }
            if (!std::isfinite(r)) continue;
            const double rounding = (2.0 * gamma_t + 8.0 * kU) * std::exp(std::min(2.0 * E, 700.0)) +
                                    0.0;  // relative to V1 (or max|v| for the hull bound)
            const double flush = T * std::ldexp(1.0, -125) * vabs;
            double tol;
            if (row_finite && col_finite) {
              // V1 uses the double weights, which underflow to exactly 0 for keys more than ~745 below the max
              // logit; a logit error that large (2E >= 700) can make such a key win in float32, so there the
              // weight-ratio bound says nothing and only the convex hull bounds the result.
              const double perturbation = 2.0 * E >= 700.0
                                              ? INFINITY
                                              : std::expm1(2.0 * E) * v1 + rounding * v1 + 4.0 * kU * v1;
              const double hull = (vmax - vmin) + (2.0 * gamma_t + 8.0 * kU) * vabs;
              tol = std::min(perturbation, hull) + flush + kU * std::abs(double(r));
            } else {
              // Non-finite q/k (some logits -inf, weight 0 in both) or v: only the convex-hull bound over
              // the finite visible values is checked.
              double fmin = INFINITY, fmax = -INFINITY, fabs_max = 0.0;
              for (int32_t j = 0; j < T; ++j) {
                const double x = v.at(b, j, c);
                if (!visible[j] || !std::isfinite(x)) continue;
                fmin = std::min(fmin, x);
                fmax = std::max(fmax, x);
                fabs_max = std::max(fabs_max, std::abs(x));
              }
              tol = (fmax - fmin) + (2.0 * gamma_t + 8.0 * kU) * fabs_max + flush + kU * std::abs(double(r));
            }
            // Products p_j v_jd and partial sums in the denormal range lose up to 2^-150 each, absolutely
            // (the division by l >= 1 does not enlarge that), and the reference's rounding to float too.
            tol += (T + 2) * double(std::numeric_limits<float>::denorm_min());
            const double err = std::abs(double(f) - double(r));
            if (!(err <= tol)) {
              std::fprintf(stderr,
                           "b=%d h=%d i=%d e=%d B=%d S=%d T=%d D=%d H=%d causal=%d mask=%d scale=%g: fast=%.9g ref=%.9g "
                           "err=%g tol=%g (E=%g V1=%g hull=[%g, %g])\n",
                           b, h, i, e, B, S, T, D, shape.num_heads, causal, with_mask, double(scale), double(f),
                           double(r), err, tol, E, v1, vmin, vmax);
              fail("fast and reference differ beyond the derived tolerance");
            }
          }
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const uint8_t h0 = in.u8(), h1 = in.u8(), h2 = in.u8(), h3 = in.u8(), h4 = in.u8(), flags = in.u8(),
                layout = in.u8(), mask_kind = in.u8(), value_kinds = in.u8(), v_kind = in.u8(),
                scale_kind = in.u8();
  const uint64_t seed = in.u64();

  mha::AttentionShape shape;
  shape.batch = 1 + h0 % 3;
  shape.seq_len = pick_len(h1);
  shape.kv_seq_len = (flags & 0x40) ? shape.seq_len : pick_len(h2);
  shape.num_heads = 1 + h3 % 4;
  const int32_t head_dim = (h4 < 200) ? 1 + h4 % 20 : 1 + h4 % 70;  // odd and 1 included
  shape.d_model = head_dim * shape.num_heads;
  // Keep one input cheap (the reference is O(B H S T Dh)): shrink T, then S.
  while (int64_t{shape.batch} * shape.seq_len * shape.kv_seq_len * shape.d_model > 150000) {
    if (shape.kv_seq_len > 1) shape.kv_seq_len = (shape.kv_seq_len + 1) / 2;
    else shape.seq_len = (shape.seq_len + 1) / 2;
  }
  const int32_t B = shape.batch, S = shape.seq_len, T = shape.kv_seq_len, D = shape.d_model, Dh = head_dim;
  const bool causal = flags & 1;
  const bool with_mask = flags & 2;
  const bool strided = flags & 4;

  // Offsets (misalignment by whole floats) and gaps: layout bits per tensor.
  auto make = [&](int32_t rows, int which) {
    const int bits = (layout >> (2 * which)) & 3;
    const int32_t off = bits & 1 ? 1 + which % 3 : 0;
    const int32_t row_pad = strided ? (bits & 2 ? 1 + which : 0) : 0;
    const int32_t batch_pad = strided ? which : 0;
    return Strided(B, rows, D, off, row_pad, batch_pad);
  };
  Strided q = make(S, 0), k = make(T, 1), v = make(T, 2);

  std::mt19937_64 rng(seed);
  auto cells_of = [](Strided& t) {
    std::vector<float*> cells;
    for (int32_t b = 0; b < t.batch; ++b)
      for (int32_t r = 0; r < t.rows; ++r)
        for (int32_t c = 0; c < t.d; ++c) cells.push_back(&t.at(b, r, c));
    return cells;
  };
  std::vector<float*> q_cells = cells_of(q), k_cells = cells_of(k), v_cells = cells_of(v);
  fill_values(q_cells, value_kinds & 7, rng);
  fill_values(k_cells, value_kinds >> 3 & 7, rng);
  fill_values(v_cells, v_kind, rng);
  if (value_kinds & 0x40) {  // k = q (self-attention on one tensor) when the shapes agree
    if (S == T) for (size_t i = 0; i < k_cells.size(); ++i) *k_cells[i] = *q_cells[i];
  }

  std::vector<uint8_t> mask;
  if (with_mask) {
    mask.resize(size_t(B) * S * T);
    const int density = mask_kind % 5;  // all on, all off, 1/2, 7/8, 1/8
    for (uint8_t& m : mask) {
      const uint32_t r = uint32_t(rng() & 7);
      m = density == 0 ? 1 : density == 1 ? 0 : density == 2 ? (r & 1) : density == 3 ? (r != 0) : (r == 0);
      if (m && (mask_kind & 0x80)) m = uint8_t(1 + rng() % 255);  // any nonzero byte means attend
    }
  }
  const float scale = pick_scale(scale_kind, in, Dh);

  // Injections: 4 bytes each, (target, index lo, index hi, kind).
  while (in.remaining_bytes() >= 4) {
    const uint8_t target = in.u8();
    const uint16_t index = in.u16();
    const uint8_t kind = in.u8();
    switch (target % 4) {
      case 0: *q_cells[index % q_cells.size()] = special_value(kind); break;
      case 1: *k_cells[index % k_cells.size()] = special_value(kind); break;
      case 2: *v_cells[index % v_cells.size()] = special_value(kind); break;
      default: if (!mask.empty()) mask[index % mask.size()] ^= 1; break;
    }
  }

  mha::AttentionArgs args;
  args.shape = shape;
  args.q = q.view<const float>();
  args.k = k.view<const float>();
  args.v = v.view<const float>();
  args.mask = mask.empty() ? nullptr : mask.data();
  args.causal = causal;
  args.scale = scale;

  // Reference, into a strided output too.
  Strided ref = make(S, 3);
  args.out = ref.view<float>();
  if (mha::reference_attention(args) != mha::Status::kOk) fail("reference rejected a valid call");
  for (size_t i = 0; i < ref.storage.size(); ++i) {
    if (!ref.is_element(i) && !is_sentinel(ref.storage[i])) fail("reference wrote outside the output elements");
  }

  // split/merge round trip on q's values (dense copies).
  {
    std::vector<float> x(q_cells.size()), xh(x.size()), back(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = *q_cells[i];
    if (mha::split_heads(x.data(), B, S, D, shape.num_heads, xh.data()) != mha::Status::kOk ||
        mha::merge_heads(xh.data(), B, S, D, shape.num_heads, back.data()) != mha::Status::kOk) {
      fail("split/merge rejected a valid call");
    }
    if (std::memcmp(x.data(), back.data(), x.size() * sizeof(float)) != 0) fail("merge(split(x)) != x");
  }

  ++g_counters.inputs;
  if (std::getenv("MHA_FUZZ_VERBOSE")) std::fprintf(stderr, "input: B=%d S=%d T=%d D=%d H=%d causal=%d mask=%d strided=%d scale=%g\n", B, S, T, D, shape.num_heads, causal, with_mask, strided, double(scale));
  std::vector<KernelOutput> outputs;
  for (const mha::KernelVariant* kernel : mha::kernel_variants()) {
    g_kernel_name = kernel->name;
    // The variant, scratch poisoned with NaN first.
    outputs.push_back(KernelOutput{kernel->name, make(S, 3)});
    Strided& out = outputs.back().out;
    args.out = out.view<float>();
    const mha::KernelPlan plan = kernel->plan(args);
    if (!g_workspace.reserve(plan.scratch.total)) fail("workspace reserve");
    std::fill(g_workspace.data(), g_workspace.data() + g_workspace.capacity(), kNaN);
    if (mha::attention(args, g_workspace, *kernel) != mha::Status::kOk) fail("attention rejected a valid call");
    for (size_t i = 0; i < out.storage.size(); ++i) {
      if (!out.is_element(i) && !is_sentinel(out.storage[i])) fail("attention wrote outside the output elements");
    }

    // Units in reverse order, fresh NaN-poisoned scratch: bit-identical.
    Strided out2 = make(S, 3);
    mha::AttentionArgs a2 = args;
    a2.out = out2.view<float>();
    std::vector<float> scratch(plan.scratch.total + 16, kNaN);
    float* aligned = scratch.data();
    while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
    for (int64_t u = plan.unit_count - 1; u >= 0; --u) kernel->run_unit(a2, plan, mha::plan_unit(shape, plan, u), aligned);
    if (std::memcmp(out2.storage.data(), out.storage.data(), out.storage.size() * sizeof(float)) != 0) {
      fail("units in reverse order differ from attention()");
    }
  }
  compare_with_reference(args, q, k, v, outputs, ref, mask, scale, Dh);
  return 0;
}
