// The thread pool and the parallel attention (src/mha/core/parallel.hpp): every index runs exactly once, and
// the output is bit-identical to the single-threaded attention() for 1, 2, 3 and 4 threads, on plain,
// causal, masked and cross-attention shapes, for every kernel variant. Native only: the wasm Catch2 binary is
// single-threaded; the threaded wasm build is tested through the JS API (tests/js/threads.test.mjs).
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/core/parallel.hpp"
#include "test_util.hpp"
#include "strided_call.hpp"

namespace {

struct Counter {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> bad_worker{0};
  int workers = 0;
  explicit Counter(size_t n, int w) : hits(n), workers(w) {}
};

void count_hit(void* ctx, int64_t index, int worker) {
  auto* c = static_cast<Counter*>(ctx);
  c->hits[static_cast<size_t>(index)].fetch_add(1);
  if (worker < 0 || worker >= c->workers) c->bad_worker.fetch_add(1);
}

}  // namespace

TEST_CASE("thread pool: every index runs exactly once, over many loops", "[parallel]") {
  for (int threads : {1, 2, 3, 4}) {
    mha::ThreadPool pool(threads);
    REQUIRE(pool.size() == threads);
    for (int64_t count : {0, 1, 2, 3, 7, 64, 1000}) {
      for (int repeat = 0; repeat < 20; ++repeat) {
        Counter c(static_cast<size_t>(count), pool.size());
        pool.parallel_for(count, &count_hit, &c);
        INFO("threads " << threads << " count " << count << " repeat " << repeat);
        for (auto& h : c.hits) REQUIRE(h.load() == 1);
        REQUIRE(c.bad_worker.load() == 0);
      }
    }
  }
}

TEST_CASE("thread pool: begin/join runs every index exactly once while the caller does other work", "[parallel]") {
  for (int threads : {1, 2, 3}) {
    mha::ThreadPool pool(threads);
    for (int64_t count : {0, 1, 2, 5, 64, 500}) {
      for (int repeat = 0; repeat < 10; ++repeat) {
        Counter c(static_cast<size_t>(count), pool.size());
        pool.begin(count, &count_hit, &c);
        // The caller's own work between the halves (web/src copies the next batch group here).
        volatile int64_t busy = 0;
        for (int i = 0; i < 2000 * repeat; ++i) busy = busy + i;
        pool.join();
        INFO("threads " << threads << " count " << count << " repeat " << repeat);
        for (auto& h : c.hits) REQUIRE(h.load() == 1);
        REQUIRE(c.bad_worker.load() == 0);
      }
    }
  }
}

// Two loops in flight: every index of each runs once, the second's indices only after the first's are
// all claimed, and join() returns only once the oldest loop is done.
struct OrderedLoop {
  std::vector<std::atomic<int>> hits;
  std::atomic<int64_t> done{0};
  const OrderedLoop* before = nullptr;  // the loop begun just before this one
  std::atomic<int> started_early{0};    // indices run while `before` still had unclaimed ones
  std::atomic<int> bad_worker{0};
  int workers = 0;
  int spin = 0;
  OrderedLoop(size_t n, int w, int busy) : hits(n), workers(w), spin(busy) {}
};

void ordered_hit(void* ctx, int64_t index, int worker) {
  auto* c = static_cast<OrderedLoop*>(ctx);
  // Once a thread runs an index of this loop, every index of the previous one is claimed, so at most one
  // per thread of them is still running.
  if (c->before != nullptr && c->before->done.load() < static_cast<int64_t>(c->before->hits.size()) - c->workers) {
    c->started_early.fetch_add(1);
  }
  volatile int busy = 0;
  for (int i = 0; i < c->spin * (1 + static_cast<int>(index % 7)); ++i) busy = busy + i;
  c->hits[static_cast<size_t>(index)].fetch_add(1);
  if (worker < 0 || worker >= c->workers) c->bad_worker.fetch_add(1);
  c->done.fetch_add(1);
}

TEST_CASE("thread pool: a second loop begun before the first is joined runs after it, each index once", "[parallel]") {
  for (int threads : {1, 2, 3, 4}) {
    mha::ThreadPool pool(threads);
    for (int64_t count : {0, 1, 3, 12, 97}) {
      for (int repeat = 0; repeat < 8; ++repeat) {
        // Loops 0..4 begun as web/src's pipeline does: two in flight, the oldest joined before the next.
        std::vector<std::unique_ptr<OrderedLoop>> loops;
        for (int l = 0; l < 5; ++l) {
          loops.push_back(std::make_unique<OrderedLoop>(static_cast<size_t>(count + l % 2), pool.size(), 50 * repeat));
          if (l > 0) loops[l]->before = loops[l - 1].get();
        }
        pool.begin(static_cast<int64_t>(loops[0]->hits.size()), &ordered_hit, loops[0].get());
        for (int l = 0; l < 5; ++l) {
          if (l + 1 < 5) pool.begin(static_cast<int64_t>(loops[l + 1]->hits.size()), &ordered_hit, loops[l + 1].get());
          REQUIRE(pool.loops_in_flight() == (l + 1 < 5 ? 2 : 1));
          pool.join();
          INFO("threads " << threads << " count " << count << " repeat " << repeat << " loop " << l);
          // Done when joined: every index ran exactly once.
          REQUIRE(loops[l]->done.load() == static_cast<int64_t>(loops[l]->hits.size()));
          for (auto& h : loops[l]->hits) REQUIRE(h.load() == 1);
          REQUIRE(loops[l]->bad_worker.load() == 0);
          REQUIRE(loops[l]->started_early.load() == 0);
        }
        REQUIRE(pool.loops_in_flight() == 0);
      }
    }
    // A third begin() joins the oldest first; parallel_for joins everything in flight.
    OrderedLoop a(40, pool.size(), 10), b(40, pool.size(), 10), c(40, pool.size(), 10), d(40, pool.size(), 10);
    pool.begin(40, &ordered_hit, &a);
    pool.begin(40, &ordered_hit, &b);
    pool.begin(40, &ordered_hit, &c);
    REQUIRE(a.done.load() == 40);
    REQUIRE(pool.loops_in_flight() == 2);
    pool.parallel_for(40, &ordered_hit, &d);
    REQUIRE(pool.loops_in_flight() == 0);
    for (OrderedLoop* x : {&b, &c, &d}) REQUIRE(x->done.load() == 40);
  }
}

TEST_CASE("thread pool: a pool that is created and destroyed without work joins cleanly", "[parallel]") {
  for (int i = 0; i < 20; ++i) {
    mha::ThreadPool pool(3);
    REQUIRE(pool.size() == 3);
  }
}

TEST_CASE("parallel attention: bit-identical to attention() for 1, 2, 3, 4 threads, every kernel variant",
          "[parallel]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  struct Case {
    mha::AttentionShape shape;
    bool causal;
    bool mask;
  };
  const Case cases[] = {
      {{2, 130, 130, 64, 4}, false, false},  // several query blocks, partial last block
      {{1, 257, 257, 96, 3}, true, false},   // causal: unbalanced units
      {{3, 70, 90, 48, 2}, false, true},     // random mask, cross-attention
      {{1, 300, 200, 128, 8}, true, true},   // causal + mask, S > T
      {{1, 5, 7, 8, 2}, false, false},       // tiny: runs inline
  };
  uint32_t seed = 20240601;
  for (const Case& c : cases) {
    mha_test::Problem p(c.shape, seed++);
    p.causal = c.causal;
    if (c.mask) {
      std::mt19937 gen(seed++);
      p.mask.resize(static_cast<size_t>(c.shape.mask_elements()));
      for (auto& m : p.mask) m = (gen() % 4) != 0;
    }
    INFO("shape B" << c.shape.batch << " S" << c.shape.seq_len << " T" << c.shape.kv_seq_len << " D" << c.shape.d_model
                   << " H" << c.shape.num_heads << " causal " << c.causal << " mask " << c.mask << " seed " << seed);
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(), ws, kernel) == mha::Status::kOk);
    const std::vector<float> expected = p.out;
    for (int threads : {1, 2, 3, 4}) {
      mha::ParallelAttention parallel(threads, kernel);
      REQUIRE(parallel.threads() == threads);
      for (int repeat = 0; repeat < 3; ++repeat) {
        std::fill(p.out.begin(), p.out.end(), -1.0f);
        REQUIRE(parallel.run(p.args()) == mha::Status::kOk);
        INFO("threads " << threads << " repeat " << repeat);
        REQUIRE(mha_test::bit_equal(p.out, expected));
      }
      // out = q itself (web/src/index.ts stages q and takes the result from there): units of other
      // heads read those rows while one writes its head's columns.
      mha_test::Problem in_place = p;
      mha::AttentionArgs a = in_place.args();
      a.out = mha::dense_view<float>(in_place.q.data(), c.shape.seq_len, c.shape.d_model);
      REQUIRE(parallel.run(a) == mha::Status::kOk);
      INFO("threads " << threads << ", out = q");
      REQUIRE(mha_test::bit_equal(in_place.q, expected));
    }
  }
}

TEST_CASE("parallel attention: Dv, sinks and rope bit-identical to attention() for 1, 2, 3, 4 threads",
          "[parallel][sinks-rope]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const mha::AttentionShape shapes[] = {
      {2, 130, 130, 64, 4, 2, 24}, {1, 257, 300, 96, 3, 1, 5}, {1, 200, 200, 64, 8, 2, 96}};
  uint64_t seed = 7300;
  for (const mha::AttentionShape& s : shapes) {
    mha_test::StridedCall c(s, seed++, 1, 2);
    c.base.causal = s.seq_len != 130;
    c.base.query_offset = s.kv_seq_len - s.seq_len;
    c.random_sinks(seed++, 3.0f);
    c.set_rope(s.head_dim() - 2, s.kv_seq_len, s.num_heads == 8);
    std::vector<float> expected, expected_lse, out, lse;
    mha::Workspace ws;
    REQUIRE(mha::attention(c.args(expected, &expected_lse), ws, kernel) == mha::Status::kOk);
    for (int threads : {1, 2, 3, 4}) {
      mha::ParallelAttention parallel(threads, kernel);
      INFO("threads " << threads << " H " << s.num_heads);
      REQUIRE(parallel.run(c.args(out, &lse)) == mha::Status::kOk);
      REQUIRE(mha_test::bit_equal(out, expected));
      REQUIRE(mha_test::bit_equal(lse, expected_lse));
    }
  }
}

TEST_CASE("parallel attention: begin/join of consecutive calls, each on its own buffers, gives the bits of attention()",
          "[parallel]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  // Two batch groups of one call, as web/src pipelines them: the second is prepared while the first runs.
  mha_test::Problem first({2, 130, 130, 64, 4}, 501), second({1, 130, 130, 64, 4}, 502);
  first.causal = second.causal = true;
  mha::Workspace ws;
  REQUIRE(mha::attention(first.args(), ws, kernel) == mha::Status::kOk);
  REQUIRE(mha::attention(second.args(), ws, kernel) == mha::Status::kOk);
  const std::vector<float> expected_first = first.out, expected_second = second.out;
  for (int threads : {1, 2, 3}) {
    mha::ParallelAttention parallel(threads, kernel);
    for (int repeat = 0; repeat < 3; ++repeat) {
      std::fill(first.out.begin(), first.out.end(), -1.0f);
      std::fill(second.out.begin(), second.out.end(), -1.0f);
      mha::AttentionArgs args = first.args();
      REQUIRE(parallel.begin(args) == mha::Status::kOk);
      args.scale = -1.0f;  // begin() copied the args: the caller may reuse them at once
      parallel.join();
      REQUIRE(parallel.begin(second.args()) == mha::Status::kOk);
      parallel.join();
      parallel.join();  // nothing pending: returns at once
      // The second begun while the first is pending (web/src's pipeline). It is below kParallelMinFlops,
      // so it runs on the caller inside begin(), beside the first's workers; each keeps its own bits.
      std::fill(first.out.begin(), first.out.end(), -1.0f);
      std::fill(second.out.begin(), second.out.end(), -1.0f);
      REQUIRE(parallel.begin(first.args()) == mha::Status::kOk);
      REQUIRE(parallel.begin(second.args()) == mha::Status::kOk);
      REQUIRE(parallel.pending() == (threads > 1 ? 1 : 0));
      REQUIRE(mha_test::bit_equal(second.out, expected_second));
      parallel.join();
      REQUIRE(mha_test::bit_equal(first.out, expected_first));
      parallel.join();
      REQUIRE(parallel.pending() == 0);
      INFO("threads " << threads << " repeat " << repeat);
      REQUIRE(mha_test::bit_equal(first.out, expected_first));
      REQUIRE(mha_test::bit_equal(second.out, expected_second));
    }
    // A refused call leaves nothing to join, and the next call works.
    mha::AttentionArgs bad = first.args();
    bad.scale = std::numeric_limits<float>::quiet_NaN();
    REQUIRE(parallel.begin(bad) == mha::Status::kBadScale);
    parallel.join();
    std::fill(first.out.begin(), first.out.end(), -1.0f);
    REQUIRE(parallel.begin(first.args()) == mha::Status::kOk);
    parallel.join();
    REQUIRE(mha_test::bit_equal(first.out, expected_first));
  }
}

TEST_CASE("parallel attention: two calls pending on the pool at once, joined oldest first, keep their bits",
          "[parallel]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  std::vector<mha_test::Problem> calls;
  for (uint32_t i = 0; i < 5; ++i)
    calls.emplace_back(mha::AttentionShape{2, 130, 130 + 10 * int32_t(i), 64, 4}, 700 + i);
  std::vector<std::vector<float>> expected;
  mha::Workspace ws;
  for (auto& c : calls) {
    REQUIRE(mha::attention(c.args(), ws, kernel) == mha::Status::kOk);
    expected.push_back(c.out);
  }
  for (int threads : {2, 3}) {
    mha::ParallelAttention parallel(threads, kernel);
    for (auto& c : calls) std::fill(c.out.begin(), c.out.end(), -1.0f);
    REQUIRE(parallel.begin(calls[0].args()) == mha::Status::kOk);
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i + 1 < calls.size()) {
        REQUIRE(parallel.begin(calls[i + 1].args()) == mha::Status::kOk);
        REQUIRE(parallel.pending() == 2);
      }
      parallel.join();
      INFO("threads " << threads << " call " << i);
      REQUIRE(mha_test::bit_equal(calls[i].out, expected[i]));
    }
    REQUIRE(parallel.pending() == 0);
    // A third begin() joins the oldest first; run() joins everything.
    for (auto& c : calls) std::fill(c.out.begin(), c.out.end(), -1.0f);
    for (size_t i = 0; i < 3; ++i) REQUIRE(parallel.begin(calls[i].args()) == mha::Status::kOk);
    REQUIRE(mha_test::bit_equal(calls[0].out, expected[0]));
    REQUIRE(parallel.run(calls[3].args()) == mha::Status::kOk);
    REQUIRE(parallel.pending() == 0);
    for (size_t i = 0; i < 4; ++i) REQUIRE(mha_test::bit_equal(calls[i].out, expected[i]));
  }
}

TEST_CASE("parallel attention: reports bad arguments as status values and frees scratch", "[parallel]") {
  mha_test::Problem p({1, 4, 4, 8, 2}, 7);
  mha::ParallelAttention parallel(2);
  auto args = p.args();
  args.scale = std::numeric_limits<float>::infinity();
  REQUIRE(parallel.run(args) == mha::Status::kBadScale);
  args = p.args();
  args.shape.num_heads = 3;
  REQUIRE(parallel.run(args) == mha::Status::kHeadsDoNotDivide);
  REQUIRE(parallel.run(p.args()) == mha::Status::kOk);
  parallel.release_scratch();
  REQUIRE(parallel.run(p.args()) == mha::Status::kOk);
}

TEST_CASE("parallel attention: the work threshold", "[parallel]") {
  REQUIRE(mha::attention_flops({1, 8, 8, 64, 4}, false) < mha::kParallelMinFlops);
  REQUIRE(mha::attention_flops({8, 128, 128, 768, 12}, false) > mha::kParallelMinFlops);
  REQUIRE(mha::attention_flops({1, 64, 64, 64, 1}, true) == 0.5 * mha::attention_flops({1, 64, 64, 64, 1}, false));
}

TEST_CASE(
    "parallel attention: with every option (GQA, window, offset, lengths, softcap, ALiBi, bias, lse) bit-identical to "
    "attention()",
    "[parallel][options]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha_test::Problem p =
      mha_test::make_problem({2, 300, 350, 8 * 16, 8, 2}, 20261202, 1.0f, mha_test::MaskKind::kNone, true);
  p.options.query_offset = 50;
  p.options.window_left = 90;
  p.options.kv_lengths = {350, 170};
  p.options.softcap = 8.0f;
  for (int h = 0; h < 8; ++h) p.options.alibi_slopes.push_back(std::exp2(-1.0f * (h + 1)));
  p.random_bias(1, 8, 5, 1.0f, 0.02);
  p.options.lse = true;
  std::vector<float> expected, expected_lse;
  mha::Workspace ws;
  REQUIRE(mha::attention(p.args(expected, &expected_lse), ws, kernel) == mha::Status::kOk);
  for (int threads : {2, 3, 4}) {
    mha::ParallelAttention parallel(threads, kernel);
    std::vector<float> out, lse;
    REQUIRE(parallel.run(p.args(out, &lse)) == mha::Status::kOk);
    INFO("threads " << threads);
    REQUIRE(mha_test::bit_equal(out, expected));
    REQUIRE(mha_test::bit_equal(lse, expected_lse));
  }
}
