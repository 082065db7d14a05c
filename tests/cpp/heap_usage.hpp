// Bytes the allocator has handed out and not taken back, for tests that a loop leaves the heap where it
// started: mallinfo in wasm (what the module's heapBytesInUse reports), the sanitizer's count under
// AddressSanitizer (whose allocator glibc's mallinfo does not see), glibc's mallinfo2 otherwise.
// glibc counts the chunks parked in its per-thread cache (tcache: at most 7 per size class up to
// 1 KiB) as in use, so there the count is exact only up to heap_slack_bytes(); a leak of a few bytes
// per step of a 20,000-step loop is still far above it. The other two are exact.
#pragma once

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MHA_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MHA_TEST_ASAN 1
#endif

#if MHA_TEST_ASAN
#include <sanitizer/allocator_interface.h>
#else
#include <malloc.h>
#endif

namespace mha_test {

inline size_t heap_bytes_in_use() {
#if MHA_TEST_ASAN
  return __sanitizer_get_current_allocated_bytes();
#elif defined(__EMSCRIPTEN__)
  return static_cast<size_t>(mallinfo().uordblks);
#else
  return mallinfo2().uordblks;
#endif
}

inline size_t heap_slack_bytes() {
#if MHA_TEST_ASAN || defined(__EMSCRIPTEN__)
  return 0;
#else
  return 64 * 1024;
#endif
}

// True when `now` is `before`, up to the allocator's slack.
inline bool heap_back_to(size_t before, size_t now) {
  return now >= before ? now - before <= heap_slack_bytes() : before - now <= heap_slack_bytes();
}

}  // namespace mha_test
