// Small numeric facts shared by the kernels, the decode path and the reference (one definition each).
#pragma once

#include <cstdint>
#include <limits>

namespace mha {

// The score of a hidden key and the running max of a row that has seen no key yet.
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// The same in double, for the reference and the decode driver's exact rows.
constexpr double kNegInfDouble = -std::numeric_limits<double>::infinity();

// log2(e): the kernels keep scores in log2 units (exp(s) = 2^(s * log2 e)).
constexpr double kLog2e = 1.4426950408889634;

// x rounded up to a multiple of m (x >= 0, m > 0): padded rows, lanes and head dims.
constexpr int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

}  // namespace mha
