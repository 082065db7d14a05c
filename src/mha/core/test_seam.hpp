// The one seam through which tests and timing harnesses observe or steer the core. CMake defines
// MHA_TEST_SEAM=1 for the cores they link (MHA_TEST_SEAM_CORES in CMakeLists.txt: the Catch2 suites'
// and the decode benches'); the npm modules' cores are built without it, and nothing here then does
// anything.
//  - DecodeCounters (a member of DecodeScratch): the rows that took the decode driver's exact path and
//    the calls the tiled kernel served, counted only with the seam (tests/cpp/test_decode.cpp).
//  - decode_phase_mask: the phases of the SIMD decode kernel that run (decode_simd128.cpp's
//    run_phases; bits 1 pack q, 2 scores, 4 softmax, 8 values). The phase-timing harnesses
//    (bench/kernel) clear bits to time what is left.
#pragma once

#include <atomic>
#include <cstdint>

#ifndef MHA_TEST_SEAM
#define MHA_TEST_SEAM 0
#endif

namespace mha {
namespace test_seam {

constexpr bool kEnabled = MHA_TEST_SEAM != 0;

struct DecodeCounters {
  std::atomic<int64_t> exact_rows{0};   // rows that took the exact path (non-finite float32 results)
  int64_t tiled_prefills = 0;           // calls served by the tiled kernel
  std::atomic<int64_t> prefix_keys{0};  // keys a shared prefix's pass handed to the kernel, per KV head
};

#if MHA_TEST_SEAM
extern int decode_phase_mask;  // 15: every phase (decode.cpp defines it)
#endif

}  // namespace test_seam
}  // namespace mha

#if MHA_TEST_SEAM
#define MHA_DECODE_PHASE_RUNS(bit) ((::mha::test_seam::decode_phase_mask & (bit)) != 0)
#else
#define MHA_DECODE_PHASE_RUNS(bit) true
#endif
