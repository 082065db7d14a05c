// Differential fuzzing of every kernel variant of the build (mha::kernel_variants(): simd128 and scalar)
// against the double-precision reference (mha::reference_attention), under ASan + UBSan. Built by the CMake option MHA_FUZZ (clang only);
// run with `npm run fuzz` (scripts/fuzz.sh) or the short fixed-seed slice in scripts/test.sh.
//
// Input layout (tests/fuzz/README.md describes it for corpus authors): a header of shape/config bytes,
// an 8-byte seed for the bulk values, then any number of 4-byte "injections" that put special values
// (NaN, +-inf, denormals, +-0, FLT_MAX, 1e30, ...) at chosen positions of q, k, v or flip mask bytes.
// An input that ends with "OPTS" and 12 option bytes also sets the options of docs/spec.md Part 2
// (grouped-query heads, query offset, kvLengths, window, softcap, ALiBi, bias, emptyRows, lse); inputs
// without that tail (every v1 reproducer of the corpus) decode as before.
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
//        - both finite: |fast - ref| <= tol, the bound derived below; empty rows exactly;
//      and per lse element: same class, -inf exactly, finite within E + 2 gamma_T + 8u max(1, |lse|);
//      except in the "float32 range" cases listed under `Domain`, which are documented limits of a
//      float32 kernel (README, Guarantees) and are counted, not failed.
//
// Tolerance (u = 2^-24, the float32 unit roundoff; all sums over the keys j visible to the row):
//   a_j = sum_d |q_d k_jd|, A = |scale| * max_j a_j       (bounds every |logit|)
//   The float logit carries an absolute error e_j <= (Dh + 5) u A  (Dh-term dot product; the scale
//   rounded once more when log2(e) is folded into it, then the multiply; the subtraction of the running
//   max; log2(e) itself), the vectorized 2^x a relative error of a few ulp, and every online-softmax
//   rescale one more exp: E = 2 * ((Dh + 5) u A + (tiles + 2) * 4u). The options add their float
//   roundings to each logit: softcap c*tanh (a few ulp of c; tanh' <= 1 passes the error above
//   through), ALiBi slope*|p - j| and bias (log2(e) folded in, an add: 3u of each term's size) and the
//   rounding of the final score (u |s|), at their largest over the visible keys.
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
//   (a) logit overflow: max_j a_j or A >= FLT_MAX / 4, or a logit term of the options (ALiBi, bias)
//       that large: q.k (or scale * q.k, or the score) is not representable in float32; the kernel sees +-inf logits (so NaN or a different winner) where the reference
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
#include "fuzz_input.hpp"

namespace {

using namespace fuzz;
const char* g_kernel_name = "";  // the variant being checked, for failure messages

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_attention: FAILED (kernel %s): %s\n", g_kernel_name, what);
  std::fflush(stderr);
  __builtin_trap();
}

int value_class(float x) { return std::isnan(x) ? 0 : std::isinf(x) ? (x > 0 ? 1 : 2) : 3; }

// Values of one tensor: the class byte picks a distribution, the PRNG the values.
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
  std::vector<float> lse;  // (B, H, S) when the input asks for it
};

// Check 6 for every variant's output: per row the reference weights in double, the tolerance terms, then
// every column of each output.
void compare_with_reference(const mha::AttentionArgs& args, const Strided& q, const Strided& k, const Strided& v,
                            const std::vector<KernelOutput>& outputs, const Strided& ref,
                            const std::vector<float>& ref_lse, const std::vector<uint8_t>& mask, float scale,
                            int32_t Dh) {
  const mha::AttentionShape& shape = args.shape;
  const int32_t group = shape.num_heads / shape.kv_heads();
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
        bool row_finite = true, row_nan = false;
        double a_max = 0.0, m = -INFINITY, option_terms = 0.0, score_max = 0.0;
        const int32_t g = h / group;
        const double position = double(args.query_offset) + i;
        const float* bias_row = args.bias.data == nullptr
                                    ? nullptr
                                    : args.bias.data + b * args.bias.batch_stride + h * args.bias.head_stride +
                                          int64_t{i} * T;
        for (int32_t j = 0; j < T; ++j) {
          visible[j] = visibility.visible(i, j);
          if (!visible[j]) continue;
          double dot = 0.0, a = 0.0;
          for (int32_t e = 0; e < Dh; ++e) {
            const double qe = q.at(b, i, h * Dh + e), ke = k.at(b, j, g * Dh + e);
            if (!std::isfinite(qe) || !std::isfinite(ke)) row_finite = false;
            dot += qe * ke;
            if (std::isfinite(qe * ke)) a += std::abs(qe * ke);  // finite terms: can their float sum overflow?
          }
          // The score in the order of docs/spec.md 2.4, and the size of each term the kernels round.
          double logit = dot * double(scale);
          if (args.softcap > 0.0f) {
            logit = double(args.softcap) * std::tanh(logit / args.softcap);
            option_terms = std::max(option_terms, 4.0 * double(args.softcap));
          }
          if (args.alibi_slopes != nullptr) {
            const double alibi = double(args.alibi_slopes[h]) * std::abs(position - j);
            logit -= alibi;
            option_terms = std::max(option_terms, 3.0 * std::abs(alibi));
          }
          if (bias_row != nullptr) {
            logit += double(bias_row[j]);
            if (std::isfinite(bias_row[j])) option_terms = std::max(option_terms, 3.0 * std::abs(double(bias_row[j])));
          }
          row_nan |= std::isnan(logit);
          logits[j] = logit;
          // A -inf score hides its key, as the mask does (the reference never reads it).
          if (logit == -INFINITY) {
            visible[j] = 0;
            continue;
          }
          if (std::isfinite(logit)) score_max = std::max(score_max, std::abs(logit));
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
        const bool logit_range = (a_max >= kFltMax / 4.0 || A >= kFltMax / 4.0 || option_terms >= kFltMax / 16.0);
        const double E = 2.0 * ((Dh + 5) * kU * A + (tiles + 2) * 4.0 * kU +
                                std::abs(double(scale)) * Dh * std::ldexp(1.0, -149) + kU * (option_terms + score_max));

        // lse: same class, -inf exactly, finite within the logit error and the rounding of the sum.
        const size_t lse_index = (size_t(b) * shape.num_heads + h) * S + i;
        if (!ref_lse.empty() && !(logit_range && !strict)) {
          const float r = ref_lse[lse_index];
          for (const KernelOutput& output : outputs) {
            g_kernel_name = output.kernel;
            const float f = output.lse[lse_index];
            if (value_class(f) != value_class(r)) {
              std::fprintf(stderr, "lse b=%d h=%d i=%d: fast=%g ref=%g\n", b, h, i, double(f), double(r));
              fail("fast and reference lse differ in NaN/inf class");
            }
            const double lse_tol = E + 2.0 * gamma_t + 8.0 * kU * std::max(1.0, std::abs(double(r)));
            if (std::isfinite(r) && !(std::abs(double(f) - r) <= lse_tol)) {
              std::fprintf(stderr, "lse b=%d h=%d i=%d: fast=%.9g ref=%.9g tol=%g\n", b, h, i, double(f), double(r), lse_tol);
              fail("fast and reference lse differ beyond the derived tolerance");
            }
          }
        }
        // An empty row (no visible key, no NaN score): every kernel hands it to the reference, exactly.
        const bool empty_row = m == -INFINITY && !row_nan;

        for (int32_t e = 0; e < Dh; ++e) {
          const int32_t c = h * Dh + e;
          const float r = ref.at(b, i, c);
          double v1 = 0.0, vmin = INFINITY, vmax = -INFINITY, vabs = 0.0, vabs_finite = 0.0;
          bool col_finite = true;
          for (int32_t j = 0; j < T; ++j) {
            if (!visible[j]) continue;
            const double x = v.at(b, j, g * Dh + e);
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
            if (empty_row) {
              if (std::memcmp(&f, &r, sizeof f) != 0 && !(std::isnan(f) && std::isnan(r))) {
                std::fprintf(stderr, "empty row b=%d h=%d i=%d e=%d: fast=%g ref=%g\n", b, h, i, e, double(f), double(r));
                fail("an empty row differs from the reference's");
              }
              continue;
            }
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
                if (!visible[j] || !std::isinf(v.at(b, j, g * Dh + e))) continue;
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
                  std::fprintf(stderr, "  key %d visible=%d logit=%g v=%g:", j, visible[j], logits[j], double(v.at(b, j, g * Dh + e)));
                  for (int32_t x = 0; x < Dh; ++x) std::fprintf(stderr, " %g*%g", double(q.at(b, i, h * Dh + x)), double(k.at(b, j, g * Dh + x)));
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
                const double x = v.at(b, j, g * Dh + e);
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
  const FuzzOptions options = split_options(data, size);
  const uint8_t* o = options.bytes;  // all 0 without an options tail
  Reader in{data, size};
  const uint8_t h0 = in.u8(), h1 = in.u8(), h2 = in.u8(), h3 = in.u8(), h4 = in.u8(), flags = in.u8(),
                layout = in.u8(), mask_kind = in.u8(), value_kinds = in.u8(), v_kind = in.u8(),
                scale_kind = in.u8();
  const uint64_t seed = in.u64();

  mha::AttentionShape shape;
  shape.batch = 1 + h0 % 3;
  shape.seq_len = pick_len(h1);
  shape.kv_seq_len = (flags & 0x40) ? shape.seq_len : pick_len(h2);
  shape.num_kv_heads = 1 + h3 % 4;
  shape.num_heads = shape.num_kv_heads * (1 + o[0] % 4);  // grouped-query heads with options
  const int32_t head_dim = (h4 < 200) ? 1 + h4 % 20 : 1 + h4 % 70;  // odd and 1 included
  shape.d_model = head_dim * shape.num_heads;
  const int32_t kv_d = head_dim * shape.num_kv_heads;
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
    return Strided(B, rows, which == 1 || which == 2 ? kv_d : D, off, row_pad, batch_pad);
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

  // The options tail (its own PRNG stream, so the values above do not depend on it).
  OptionBuffers option_buffers;
  if (options.present) apply_options(options, seed, args, option_buffers);
  const bool want_lse = options.present && (o[10] & 2);
  std::vector<float> ref_lse;
  if (want_lse) {
    ref_lse.assign(size_t(B) * shape.num_heads * S, sentinel());
    args.lse = ref_lse.data();
  }

  // Reference, into a strided output too.
  Strided ref = make(S, 3);
  args.out = ref.view<float>();
  if (mha::reference_attention(args) != mha::Status::kOk) fail("reference rejected a valid call");
  for (float x : ref_lse) {
    if (is_sentinel(x)) fail("the reference left an lse element unwritten");
  }
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
  if (std::getenv("MHA_FUZZ_VERBOSE")) {
    std::fprintf(stderr,
                 "input: B=%d S=%d T=%d D=%d H=%d Hkv=%d causal=%d mask=%d strided=%d scale=%g; offset=%d kvLengths=%d "
                 "window=[%d, %d] softcap=%g alibi=%d bias=%d emptyRows=%d lse=%d\n",
                 B, S, T, D, shape.num_heads, shape.num_kv_heads, causal, with_mask, strided, double(scale),
                 args.query_offset, int(args.kv_lengths != nullptr), args.window_left, args.window_right,
                 double(args.softcap), int(args.alibi_slopes != nullptr), int(args.bias.data != nullptr),
                 int(args.empty_rows), int(want_lse));
  }
  std::vector<KernelOutput> outputs;
  for (const mha::KernelVariant* kernel : mha::kernel_variants()) {
    g_kernel_name = kernel->name;
    // The variant, scratch poisoned with NaN first.
    outputs.push_back(KernelOutput{kernel->name, make(S, 3), {}});
    Strided& out = outputs.back().out;
    args.out = out.view<float>();
    if (want_lse) {
      outputs.back().lse.assign(ref_lse.size(), sentinel());
      args.lse = outputs.back().lse.data();
    }
    const mha::KernelPlan plan = kernel->plan(args);
    if (!g_workspace.reserve(plan.scratch.total)) fail("workspace reserve");
    std::fill(g_workspace.data(), g_workspace.data() + g_workspace.capacity(), kNaN);
    if (mha::attention(args, g_workspace, *kernel) != mha::Status::kOk) fail("attention rejected a valid call");
    for (size_t i = 0; i < out.storage.size(); ++i) {
      if (!out.is_element(i) && !is_sentinel(out.storage[i])) fail("attention wrote outside the output elements");
    }
    for (float x : outputs.back().lse) {
      if (is_sentinel(x)) fail("attention left an lse element unwritten");
    }

    // Units in reverse order, fresh NaN-poisoned scratch: bit-identical.
    Strided out2 = make(S, 3);
    mha::AttentionArgs a2 = args;
    a2.out = out2.view<float>();
    std::vector<float> lse2(outputs.back().lse.size());
    a2.lse = want_lse ? lse2.data() : nullptr;
    std::vector<float> scratch(plan.scratch.total + 16, kNaN);
    float* aligned = scratch.data();
    while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
    for (int64_t u = plan.unit_count - 1; u >= 0; --u) kernel->run_unit(a2, plan, mha::plan_unit(shape, plan, u), aligned);
    if (std::memcmp(out2.storage.data(), out.storage.data(), out.storage.size() * sizeof(float)) != 0 ||
        (want_lse && std::memcmp(lse2.data(), outputs.back().lse.data(), lse2.size() * sizeof(float)) != 0)) {
      fail("units in reverse order differ from attention()");
    }
  }
  compare_with_reference(args, q, k, v, outputs, ref, ref_lse, mask, scale, Dh);
  return 0;
}
