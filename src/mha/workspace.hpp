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

}  // namespace mha
