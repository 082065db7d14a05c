// A reusable, 64-byte aligned scratch buffer: grown on demand, never shrunk, so steady-state calls
// allocate nothing. Allocation failure is reported (false), never thrown: wasm builds have no
// exceptions and must survive out-of-memory.
#pragma once

#include <cstddef>
#include <cstdlib>

namespace mha {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { std::free(data_); }

  // Ensures room for `floats` floats; returns false (keeping the old buffer) when memory runs out.
  bool reserve(size_t floats) {
    if (floats <= capacity_) return true;
    const size_t bytes = ((floats * sizeof(float)) + kAlignment - 1) / kAlignment * kAlignment;
    void* fresh = std::aligned_alloc(kAlignment, bytes);
    if (fresh == nullptr) return false;
    std::free(data_);
    data_ = static_cast<float*>(fresh);
    capacity_ = bytes / sizeof(float);
    return true;
  }

  float* data() const { return data_; }
  size_t capacity() const { return capacity_; }

  // Returns the memory to the allocator (dispose paths); the next reserve allocates again.
  void release() {
    std::free(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  static constexpr size_t kAlignment = 64;
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

// Floats rounded up to whole 64-byte lines (16 floats): buffers laid out back to back from a Workspace's
// 64-byte aligned start each stay 64-byte aligned.
constexpr size_t whole_lines_of_floats(size_t floats) { return (floats + 15) / 16 * 16; }

// Lays a kernel's scratch buffers out back to back: take(floats) is the next buffer's offset in floats,
// `at` the floats taken so far (the Workspace size to reserve).
struct ScratchCursor {
  size_t at = 0;
  size_t take(size_t floats) {
    const size_t here = at;
    at += whole_lines_of_floats(floats);
    return here;
  }
};

}  // namespace mha
