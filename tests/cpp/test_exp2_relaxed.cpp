// The relaxed variant's exp2 (simd_exp.hpp with MHA_VARIANT_RELAXED: its Horner steps are relaxed_madd)
// under the same test as the simd128 one: this file is test_exp2.cpp compiled again by clang-19 for
// Relaxed SIMD (CMakeLists.txt, mha_tests_relaxed), so its test case is named "relaxed exp2 ...".
#include "test_exp2.cpp"
