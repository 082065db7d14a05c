// A small persistent thread pool and the parallel attention built on it.
//
// Work is a kernel variant's units (kernel.hpp: one (batch, KV head, query block) each). Threads take unit
// indices from one atomic counter (dynamic scheduling), so causal and masked calls, whose units differ
// in cost, stay balanced. Every unit does the same float operations whatever thread runs it, so the
// result is bit-identical for any thread count.
//
// C++17 and POSIX threads (pthread_create, a pthread mutex and condition variable, std::atomic): it runs
// natively and in wasm built with Emscripten's -pthread (each thread is then a Web Worker / Node worker).
// Not std::thread: libc++'s thread start-up (its per-thread __thread_struct for notify_all_at_thread_exit)
// was 1.7 kB of each threaded module for nothing this pool uses. Not std::mutex, std::condition_variable
// or std::chrono either: their libc++ objects (mutex.o, condition_variable.o, chrono.o and the
// system_error.o they report failures through) were 0.76 kB gzipped of each threaded module. A pool of 1
// thread starts no thread at all, so single-threaded wasm builds link it unchanged.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <pthread.h>

#include "mha/kernels/kernel.hpp"
#include "mha/core/shape.hpp"
#include "mha/core/workspace.hpp"

namespace mha {

class ThreadPool {
 public:
  // Body of a parallel loop: body(ctx, index, worker) with worker in [0, size()); worker 0 is the caller.
  using Body = void (*)(void* ctx, int64_t index, int worker);

  // `threads` counts the caller: threads - 1 workers are started (fewer if the platform refuses to start
  // more; size() then says how many there are). threads <= 1 starts none.
  explicit ThreadPool(int threads);
  ~ThreadPool();  // stop()s
  // Ends the workers: each leaves its loop, the caller spins (never blocks) until all have, then lets
  // them finish exiting on their own (detached). Not blocking matters in browsers, where the main thread
  // must not wait on a futex (Emscripten warns on pthread_join there). size() is 1 afterwards.
  void stop();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that may run a loop, the caller included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(ctx, i, worker) once for every i in [0, count) and returns when all have finished. The
  // caller works too, so the loop completes even if no worker ever wakes up (a Web Worker that is still
  // loading): the caller only waits for workers that have taken an index. Loops begun and not joined are
  // joined first.
  void parallel_for(int64_t count, Body body, void* ctx);

  // parallel_for in two halves, so the caller can do other work while the workers start on the loop:
  // begin() publishes the loop and returns at once; join() has the caller take the indices left, then
  // waits for the workers as parallel_for does. body and ctx must stay valid until that loop's join()
  // returns. Without workers, join() runs every index.
  //
  // begin() may be called again before join(): up to kMaxLoops loops are then in flight, and every thread
  // takes indices of the oldest loop that has some left, so a thread that runs out of one loop's indices
  // goes on with the next instead of idling while another thread finishes its last unit. join() joins the
  // oldest loop: the caller takes its indices left, then, until the workers have finished their units of
  // it, runs indices of the next loop. A begin() with kMaxLoops loops in flight first joins the oldest.
  static constexpr int kMaxLoops = 2;
  void begin(int64_t count, Body body, void* ctx);
  void join();
  // Joins every loop in flight, oldest first.
  void join_all();
  int loops_in_flight() const { return in_flight_; }
  // The slot (in [0, kMaxLoops)) the next begin() fills; the same before and after a begin() that first
  // joins the oldest, so a caller can keep per-loop state in an array indexed by it.
  int next_slot() const { return (oldest_ + in_flight_) % kMaxLoops; }

 private:
  // One published loop. body/ctx/count are written by the caller before it opens the loop under mutex_.
  struct Loop {
    Body body = nullptr;
    void* ctx = nullptr;
    int64_t count = 0;
    std::atomic<int64_t> next{0};  // next unclaimed index
    std::atomic<int> active{0};    // workers inside this loop
    // Guarded by mutex_:
    bool open = false;        // workers may enter (closed once the caller has claimed the last index)
    uint64_t generation = 0;  // the publication number of the loop in this slot
  };

  // What a worker thread starts with (pthread_create's argument): starts_ is sized before any thread
  // starts, so each start's address stays valid.
  struct WorkerStart {
    ThreadPool* pool;
    int worker;
  };
  static void* worker_entry(void* start);
  void worker_main(int worker);
  // Claims the loop's next index and runs it; false once every index is claimed.
  static bool run_next_index(Loop& loop, int worker);
  static void run_indices(Loop& loop, int worker);
  // Slot of the oldest open loop that a worker whose last-entered generations are `seen` has not
  // entered yet, or -1. Under mutex_.
  int enterable(const uint64_t* seen) const;

  std::vector<WorkerStart> starts_;
  std::vector<pthread_t> workers_;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake_ = PTHREAD_COND_INITIALIZER;
  Loop loops_[kMaxLoops];
  // Guarded by mutex_:
  uint64_t generation_ = 0;  // bumped per published loop
  bool stop_ = false;
  // The caller's own bookkeeping (only the calling thread reads or writes these):
  int oldest_ = 0;             // slot of the oldest loop in flight
  int in_flight_ = 0;          // loops begun and not yet joined
  std::atomic<int> alive_{0};  // started workers that have not left worker_main yet
  // generation_ as last published (also bumped by stop()): a worker that just finished a loop polls it
  // for a short while before it blocks, so back-to-back calls do not pay a futex wake-up each.
  std::atomic<uint64_t> posted_{0};
};

// How long a worker polls for the next loop before it blocks on the condition variable. Covers the JS
// layer's staging between back-to-back calls (about 0.4 ms for a BERT-base layer).
constexpr int kWorkerSpinMicros = 500;

// Below this many floating-point operations (2*S*T*Dh per head for QK^T and 2*S*T*Dh for PV, halved
// when causal) a call runs on the calling thread: waking workers costs tens of microseconds in wasm,
// more than such a call takes.
constexpr double kParallelMinFlops = 4.0e6;

// Estimated flops of one call (the same count the benchmark uses).
double attention_flops(const AttentionShape& shape, bool causal);

// A kernel variant (kernel.hpp; the build's default unless given) over a thread pool: same semantics and
// bit-identical output to attention() with that variant. Owns one scratch Workspace per thread; not
// thread-safe itself (one call at a time).
class ParallelAttention {
 public:
  explicit ParallelAttention(int threads, const KernelVariant& kernel = default_kernel())
      : pool_(threads), scratch_(static_cast<size_t>(pool_.size())), kernel_(&kernel) {}

  // Threads actually available (1 when none could be started).
  int threads() const { return pool_.size(); }

  // The pool itself, lent to other kernels (the KV cache's decode kernel, decode.hpp).
  ThreadPool& pool() {
    join_all();  // lent with no call pending
    return pool_;
  }

  // Validates, reserves every thread's scratch (kOutOfMemory if that fails), then runs the units: on
  // the calling thread alone when the call is small, else on the pool.
  Status run(const AttentionArgs& args);

  // run() in two halves (ThreadPool::begin/join), so the caller can stage the next call's inputs and copy
  // the previous call's output while the workers compute this one: begin() validates and reserves as
  // run() does and, for a call that goes to the pool, starts the workers on it and returns; a call that
  // runs on the calling thread (small, or no workers) is done when begin() returns. join() returns once
  // the oldest pending call is done (the caller takes its units left, then the next call's while the
  // workers finish theirs). Same bits as run(). args are copied; the buffers they point to must stay
  // untouched until that call's join(). A call that begin() refuses (status) leaves nothing to join;
  // join() without a pending call returns at once. Up to ThreadPool::kMaxLoops calls may be pending: a
  // begin() beyond that joins the oldest first, and so does one whose scratch must grow.
  Status begin(const AttentionArgs& args);
  void join();
  void join_all();
  int pending() const { return pool_.loops_in_flight(); }

  // Frees the scratch buffers; the next run allocates again.
  void release_scratch();

  // Ends the worker threads (see ThreadPool::stop); later runs use the calling thread only.
  void stop_threads() {
    join_all();
    pool_.stop();
  }
  ~ParallelAttention() { join_all(); }  // before the jobs the workers read are destroyed

 private:
  // Job of one call on the pool: what run_unit reads (in parallel.cpp).
  struct UnitJob {
    AttentionArgs args;
    const KernelVariant* kernel = nullptr;
    KernelPlan plan;
    std::vector<Workspace>* scratch = nullptr;
    int64_t kv_heads = 0;  // B * Hkv
  };

  ThreadPool pool_;
  std::vector<Workspace> scratch_;
  const KernelVariant* kernel_;
  // The calls between begin() and join(), each at its pool loop's slot; they live here so the caller's
  // stack can unwind in between. Every pending call is a loop in flight on pool_ and vice versa (the
  // decode kernel borrows pool_ only through pool(), which joins them first).
  // std::optional: a slot holds nothing until its first call, so starting a pool does not write every
  // field's default into both slots (AttentionArgs has about 40 of them): zlib -9 -182 B on
  // mha-relaxed-threads.wasm.
  std::optional<UnitJob> jobs_[ThreadPool::kMaxLoops];
};

}  // namespace mha
