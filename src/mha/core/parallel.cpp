#include "mha/core/parallel.hpp"

#include <sched.h>  // sched_yield
#include <time.h>   // clock_gettime

namespace mha {
namespace {

// pthread_mutex_lock for the scope (what std::lock_guard does for a std::mutex).
class ScopedLock {
 public:
  explicit ScopedLock(pthread_mutex_t& mutex) : mutex_(mutex) { pthread_mutex_lock(&mutex_); }
  ~ScopedLock() { pthread_mutex_unlock(&mutex_); }
  ScopedLock(const ScopedLock&) = delete;
  ScopedLock& operator=(const ScopedLock&) = delete;

 private:
  pthread_mutex_t& mutex_;
};

// Microseconds of a monotonic clock (steady_clock's, without libc++'s chrono.o).
int64_t monotonic_micros() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000 + now.tv_nsec / 1000;
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads > 1) starts_.reserve(static_cast<size_t>(threads - 1));
  for (int w = 1; w < threads; ++w) {
    // A platform that cannot start another thread (pthread_create fails): keep the ones that started.
    // (In wasm the loader preloads one Web Worker per thread, so creation succeeds.)
    starts_.push_back(WorkerStart{this, w});
    alive_.fetch_add(1);
    pthread_t thread;
    if (pthread_create(&thread, nullptr, &ThreadPool::worker_entry, &starts_.back()) != 0) {
      alive_.fetch_sub(1);
      starts_.pop_back();
      break;
    }
    workers_.push_back(thread);
  }
}

void* ThreadPool::worker_entry(void* start) {
  const WorkerStart& s = *static_cast<const WorkerStart*>(start);
  s.pool->worker_main(s.worker);
  return nullptr;
}

ThreadPool::~ThreadPool() {
  stop();
  pthread_cond_destroy(&wake_);
  pthread_mutex_destroy(&mutex_);
}

void ThreadPool::stop() {
  join_all();
  if (workers_.empty()) return;
  // Detach first, while every worker still runs: detaching a thread that has already exited joins it
  // (musl), and a join on the browser's main thread is what Emscripten warns about.
  for (pthread_t t : workers_) pthread_detach(t);
  workers_.clear();
  {
    ScopedLock lock(mutex_);
    stop_ = true;
    posted_.fetch_add(1, std::memory_order_release);  // ends any worker's polling
  }
  pthread_cond_broadcast(&wake_);
  // Spin, do not block, until every worker has left worker_main and touches nothing of this pool.
  while (alive_.load(std::memory_order_acquire) != 0) sched_yield();
}

bool ThreadPool::run_next_index(Loop& loop, int worker) {
  const int64_t i = loop.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= loop.count) return false;
  loop.body(loop.ctx, i, worker);
  return true;
}

void ThreadPool::run_indices(Loop& loop, int worker) {
  while (run_next_index(loop, worker)) {
  }
}

int ThreadPool::enterable(const uint64_t* seen) const {
  int best = -1;
  for (int slot = 0; slot < kMaxLoops; ++slot) {
    const Loop& loop = loops_[slot];
    if (!loop.open || loop.generation == seen[slot]) continue;
    if (best < 0 || loop.generation < loops_[best].generation) best = slot;
  }
  return best;
}

void ThreadPool::worker_main(int worker) {
  uint64_t seen[kMaxLoops] = {};
  pthread_mutex_lock(&mutex_);
  for (;;) {
    int slot = stop_ ? -1 : enterable(seen);
    if (slot < 0 && !stop_) {
      // Poll (without the lock) for the next loop or a stop for a short while before blocking: waking a
      // blocked thread costs tens of microseconds, a Web Worker more. (Publishing takes the lock, so
      // nothing is published between reading `before` and unlocking.)
      const uint64_t before = posted_.load(std::memory_order_acquire);
      pthread_mutex_unlock(&mutex_);
      const int64_t spin_end = monotonic_micros() + kWorkerSpinMicros;
      for (uint32_t i = 1; posted_.load(std::memory_order_acquire) == before; ++i) {
        if (i % 64 == 0 && monotonic_micros() >= spin_end) break;
        sched_yield();
      }
      pthread_mutex_lock(&mutex_);
      while (!stop_ && (slot = enterable(seen)) < 0) pthread_cond_wait(&wake_, &mutex_);
    }
    if (stop_) {
      pthread_mutex_unlock(&mutex_);
      alive_.fetch_sub(1, std::memory_order_release);  // the last access to the pool
      return;
    }
    Loop& loop = loops_[slot];
    seen[slot] = loop.generation;
    loop.active.fetch_add(1, std::memory_order_acquire);
    pthread_mutex_unlock(&mutex_);
    run_indices(loop, worker);
    loop.active.fetch_sub(1, std::memory_order_release);
    pthread_mutex_lock(&mutex_);
  }
}

void ThreadPool::parallel_for(int64_t count, Body body, void* ctx) {
  join_all();
  if (workers_.empty() || count <= 1) {
    for (int64_t i = 0; i < count; ++i) body(ctx, i, 0);
    return;
  }
  begin(count, body, ctx);
  join();
}

void ThreadPool::begin(int64_t count, Body body, void* ctx) {
  if (in_flight_ == kMaxLoops) join();
  Loop& loop = loops_[next_slot()];
  ++in_flight_;
  // No worker is inside this slot: its previous loop was joined (closed, active 0) or never opened.
  loop.body = body;
  loop.ctx = ctx;
  loop.count = count;
  loop.next.store(0, std::memory_order_relaxed);
  // Without workers (or work) nothing is published: join() runs the indices on the caller.
  if (workers_.empty() || count <= 0) return;
  {
    ScopedLock lock(mutex_);
    loop.generation = ++generation_;
    loop.open = true;
    posted_.store(generation_, std::memory_order_release);
  }
  pthread_cond_broadcast(&wake_);
}

void ThreadPool::join() {
  if (in_flight_ == 0) return;
  Loop& loop = loops_[oldest_];
  run_indices(loop, 0);
  if (!workers_.empty() && loop.count > 0) {
    // Every index is claimed. Close the loop so that late workers do not enter it, then, while the
    // workers that entered finish their last units, take indices of the next loop, if any.
    {
      ScopedLock lock(mutex_);
      loop.open = false;
    }
    Loop* next = in_flight_ > 1 ? &loops_[(oldest_ + 1) % kMaxLoops] : nullptr;
    while (loop.active.load(std::memory_order_acquire) != 0) {
      if (next != nullptr && run_next_index(*next, 0)) continue;
      next = nullptr;  // every index of that loop is claimed too: wait
      sched_yield();
    }
  }
  oldest_ = (oldest_ + 1) % kMaxLoops;
  --in_flight_;
}

void ThreadPool::join_all() {
  while (in_flight_ > 0) join();
}

double attention_flops(const AttentionShape& shape, bool causal) {
  const double pairs = double(shape.batch) * shape.num_heads * shape.seq_len * shape.kv_seq_len;
  return 4.0 * pairs * shape.head_dim() * (causal ? 0.5 : 1.0);
}

namespace {

// Causal units get more expensive with their query block (they see more keys), so the threads take
// the last blocks of every head first and the cheap first blocks last: the dynamic schedule then ends
// with small units and the threads finish together (longest-first). Any order gives the same bits.
template <typename Job>
int64_t scheduled_unit(const Job& job, int64_t index) {
  if (!job.args.causal) return index;
  const int64_t blocks = job.plan.units_per_kv_head;
  const int64_t block = blocks - 1 - index / job.kv_heads;
  const int64_t head = index % job.kv_heads;
  return head * blocks + block;  // plan_unit's order: batch-major, KV head, then block
}

template <typename Job>
void run_unit(void* ctx, int64_t index, int worker) {
  const auto* job = static_cast<const Job*>(ctx);
  const WorkUnit unit = plan_unit(job->args.shape, job->plan, scheduled_unit(*job, index));
  job->kernel->run_unit(job->args, job->plan, unit, (*job->scratch)[worker].data());
}

}  // namespace

Status ParallelAttention::run(const AttentionArgs& args) {
  const Status status = begin(args);
  join_all();
  return status;
}

Status ParallelAttention::begin(const AttentionArgs& args) {
  if (pending() == ThreadPool::kMaxLoops) join();
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  const KernelPlan plan = kernel_->plan(args);
  const bool parallel =
      pool_.size() > 1 && plan.unit_count > 1 && attention_flops(args.shape, args.causal) >= kParallelMinFlops;
  // The single-threaded driver, same bits. scratch_[0] is the caller's own: no pending call's worker uses it.
  if (!parallel) return attention(args, scratch_[0], *kernel_);
  for (Workspace& scratch : scratch_) {
    // Growing a scratch frees the old buffer, which a pending call's workers may be using.
    if (scratch.capacity() < plan.scratch.total) join_all();
    if (!scratch.reserve(plan.scratch.total)) return Status::kOutOfMemory;
  }
  UnitJob& job = jobs_[pool_.next_slot()].emplace(
      UnitJob{args, kernel_, plan, &scratch_, plan.unit_count / plan.units_per_kv_head});
  pool_.begin(plan.unit_count, &run_unit<UnitJob>, &job);
  return Status::kOk;
}

void ParallelAttention::join() { pool_.join(); }

void ParallelAttention::join_all() { pool_.join_all(); }

void ParallelAttention::release_scratch() {
  join_all();
  for (Workspace& w : scratch_) w.release();
}

}  // namespace mha
