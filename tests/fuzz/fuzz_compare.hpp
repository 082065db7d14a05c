// Check 6 of the fuzz target (fuzz_attention.cpp): each kernel variant's output against the double
// reference, within the bound derived here, and the counters of the documented float32-range limits.
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
// v0.3 options: with rope, a_j uses each rotated entry's bound |a c| + |b s| and the dot's error grows
//   by 4u per term (the float32 rotation), (Dh + 9) u A; a sink is one more logit (u |sink|) in the max
//   and the sum, and a value of 0 in the hull; Dv only changes which columns are compared.
// Domain: rows whose float32 intermediates can overflow although the double reference does not
//   (a) logit overflow: max_j a_j or A >= FLT_MAX / 4, or a logit term of the options (ALiBi, bias)
//       that large: q.k (or scale * q.k, or the score) is not representable in float32; the kernel sees +-inf logits
//       (so NaN or a different winner) where the reference computes in double. PyTorch float32 behaves like the kernel.
//       Counted as `logit_range`.
//   (b) accumulation overflow: T * max_j |v_jd| >= FLT_MAX / 4 (finite v_jd): the unnormalized online-softmax
//       accumulator sum_j p_j v_jd (p_j <= 1) can overflow to inf before the final division by l.
//       Counted as `value_range`.
//   (c) weight underflow (see the check below): an infinite v at a key whose weight is 0 in one
//       precision and positive in the other: NaN vs +-inf. Counted as `weight_underflow`. MHA_FUZZ_STRICT=1 turns (a),
//       (b) and (c) into failures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/reference/reference.hpp"
#include "mha/core/shape.hpp"
#include "mha/core/visibility.hpp"
#include "fuzz_input.hpp"

namespace fuzz {

inline const char* g_kernel_name = "";  // the variant being checked, for failure messages

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz_attention: FAILED (kernel %s): %s\n", g_kernel_name, what);
  std::fflush(stderr);
  __builtin_trap();
}

inline int value_class(float x) { return std::isnan(x) ? 0 : std::isinf(x) ? (x > 0 ? 1 : 2) : 3; }

// Values of one tensor: the class byte picks a distribution, the PRNG the values.
struct Counters {
  uint64_t inputs = 0, outputs = 0, logit_range = 0, value_range = 0, weight_underflow = 0;
  ~Counters() {
    if (std::getenv("MHA_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr,
                   "fuzz_attention: %llu inputs, %llu outputs compared; float32-range exemptions: %llu logit, %llu "
                   "value, %llu weight underflow\n",
                   (unsigned long long)inputs, (unsigned long long)outputs, (unsigned long long)logit_range,
                   (unsigned long long)value_range, (unsigned long long)weight_underflow);
    }
  }
};
inline Counters g_counters;

struct KernelOutput {
  const char* kernel;  // the variant's name
  Strided out;
  std::vector<float> lse;  // (B, H, S) when the input asks for it
};

// Check 6 for every variant's output: per row the reference weights in double, the tolerance terms, then
// every column of each output.
inline void compare_with_reference(const mha::AttentionArgs& args, const Strided& q, const Strided& k, const Strided& v,
                                   const std::vector<KernelOutput>& outputs, const Strided& ref,
                                   const std::vector<float>& ref_lse, const std::vector<uint8_t>& mask, float scale,
                                   int32_t Dh) {
  const mha::AttentionShape& shape = args.shape;
  const int32_t group = shape.num_heads / shape.kv_heads();
  const int32_t B = shape.batch, S = shape.seq_len, T = shape.kv_seq_len, D = shape.d_model, Dv = shape.value_dim();
  // With rope the logits are of q and k rotated (in double, as the reference); the float32 rotation
  // rounds each entry relative to |a c| + |b s|, which the dot's bound then uses (4u more per term).
  const RotatedTensor rq = rotate_tensor(q, args.rope, Dh, args.query_offset), rk = rotate_tensor(k, args.rope, Dh, 0);
  const bool rope = args.rope.enabled();
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
        bool row_finite = true, row_nan = false, rotation_range = false;
        double a_max = 0.0, m = -INFINITY, option_terms = 0.0, score_max = 0.0;
        const int32_t g = h / group;
        const double position = double(args.query_offset) + i;
        const float* bias_row = args.bias.data == nullptr ? nullptr
                                                          : args.bias.data + b * args.bias.batch_stride +
                                                                h * args.bias.head_stride + int64_t{i} * T;
        for (int32_t j = 0; j < T; ++j) {
          visible[j] = visibility.visible(i, j);
          if (!visible[j]) continue;
          double dot = 0.0, a = 0.0;
          for (int32_t e = 0; e < Dh; ++e) {
            const double qe = rq.at(b, i, h * Dh + e), ke = rk.at(b, j, g * Dh + e);
            if (!std::isfinite(qe) || !std::isfinite(ke)) row_finite = false;
            dot += qe * ke;
            const double qm = rq.mag(b, i, h * Dh + e), km = rk.mag(b, j, g * Dh + e);
            if (std::isfinite(qm * km)) a += qm * km;  // finite terms: can their float sum overflow?
            rotation_range |= rope && (qm >= kFltMax / 4.0 || km >= kFltMax / 4.0);  // the float rotation overflows
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
        // An empty row (no visible key, no NaN score): every kernel hands it to the reference, or (with a
        // sink) gives out 0 as the reference does: exactly, either way.
        const bool empty_row = m == -INFINITY && !row_nan;
        // The sink: one more logit in the max and the sum, exact in both (u |sink| when log2(e) is folded in).
        const bool has_sink = args.sinks != nullptr;
        const double sink = has_sink ? double(args.sinks[h]) : 0.0;
        if (has_sink) {
          m = std::max(m, sink);
          score_max = std::max(score_max, std::abs(sink));
        }
        double sum = has_sink ? std::exp(sink - m) : 0.0;
        for (int32_t j = 0; j < T; ++j) {
          weights[j] = visible[j] ? std::exp(logits[j] - m) : 0.0;
          sum += weights[j];
        }
        for (int32_t j = 0; j < T; ++j) weights[j] /= sum;
        const double A = std::abs(double(scale)) * a_max;
        const bool logit_range =
            (a_max >= kFltMax / 4.0 || A >= kFltMax / 4.0 || option_terms >= kFltMax / 16.0 || rotation_range);
        const double E = 2.0 * ((Dh + (rope ? 9 : 5)) * kU * A + (tiles + 2) * 4.0 * kU +
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
              std::fprintf(stderr, "lse b=%d h=%d i=%d: fast=%.9g ref=%.9g tol=%g\n", b, h, i, double(f), double(r),
                           lse_tol);
              fail("fast and reference lse differ beyond the derived tolerance");
            }
          }
        }
        for (int32_t e = 0; e < Dv; ++e) {
          const int32_t c = h * Dv + e;
          const float r = ref.at(b, i, c);
          // A sink is a key whose value is 0 (its weight joins the sum, its value row is none): both
          // results are convex combinations of the visible v and that 0.
          double v1 = 0.0, vmin = has_sink ? 0.0 : INFINITY, vmax = has_sink ? 0.0 : -INFINITY, vabs = 0.0,
                 vabs_finite = 0.0;
          bool col_finite = true;
          for (int32_t j = 0; j < T; ++j) {
            if (!visible[j]) continue;
            const double x = v.at(b, j, g * Dv + e);
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
                std::fprintf(stderr, "empty row b=%d h=%d i=%d e=%d: fast=%g ref=%g\n", b, h, i, e, double(f),
                             double(r));
                fail("an empty row differs from the reference's");
              }
              continue;
            }
            if (!strict && (logit_range || value_range)) {
              if (value_class(f) != value_class(r) ||
                  (std::isfinite(f) && std::abs(double(f) - r) > vmax - vmin + 1e-6 * vabs)) {
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
                if (!visible[j] || !std::isinf(v.at(b, j, g * Dv + e))) continue;
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
                  std::fprintf(stderr, "  key %d visible=%d logit=%g v=%g:", j, visible[j], logits[j],
                               double(v.at(b, j, g * Dv + e)));
                  for (int32_t x = 0; x < Dh; ++x)
                    std::fprintf(stderr, " %g*%g", double(q.at(b, i, h * Dh + x)), double(k.at(b, j, g * Dh + x)));
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
              const double perturbation =
                  2.0 * E >= 700.0 ? INFINITY : std::expm1(2.0 * E) * v1 + rounding * v1 + 4.0 * kU * v1;
              const double hull = (vmax - vmin) + (2.0 * gamma_t + 8.0 * kU) * vabs;
              tol = std::min(perturbation, hull) + flush + kU * std::abs(double(r));
            } else {
              // Non-finite q/k (some logits -inf, weight 0 in both) or v: only the convex-hull bound over
              // the finite visible values is checked.
              double fmin = has_sink ? 0.0 : INFINITY, fmax = has_sink ? 0.0 : -INFINITY, fabs_max = 0.0;
              for (int32_t j = 0; j < T; ++j) {
                const double x = v.at(b, j, g * Dv + e);
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
              std::fprintf(
                  stderr,
                  "b=%d h=%d i=%d e=%d B=%d S=%d T=%d D=%d H=%d causal=%d mask=%d scale=%g: fast=%.9g ref=%.9g "
                  "err=%g tol=%g (E=%g V1=%g hull=[%g, %g])\n",
                  b, h, i, e, B, S, T, D, shape.num_heads, causal, with_mask, double(scale), double(f), double(r), err,
                  tol, E, v1, vmin, vmax);
              fail("fast and reference differ beyond the derived tolerance");
            }
          }
        }
      }
    }
  }
}

}  // namespace fuzz
