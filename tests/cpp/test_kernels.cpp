// Every kernel variant of the build (src/mha/kernels/kernel.hpp) against the double-precision reference, and the
// properties the thread pool relies on (unit order and split do not change a bit of the result). Each
// test case runs once per variant (EACH_KERNEL).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using namespace mha_test;

TEST_CASE("kernels: random shapes, masks, causal, misaligned and strided buffers match the reference", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  std::mt19937_64 pick(20240611);
  const std::vector<int> head_dims = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 63, 64, 65};
  for (int trial = 0; trial < 240; ++trial) {
    const uint64_t seed = pick();
    std::mt19937_64 rng(seed);
    auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int dh = head_dims[trial % head_dims.size()];
    const int heads = uni(1, 3);
    const int batch = uni(1, 2);
    const int s = uni(1, 70);
    const int t = uni(0, 3) == 0 ? s : uni(1, 70);  // self- and cross-attention
    const auto mask_kind = static_cast<MaskKind>(uni(0, 3));
    const bool causal = uni(0, 2) == 0;
    const int offset = uni(0, 1);
    const int row_pad = uni(0, 1) == 0 ? 0 : uni(1, 2 * dh * heads + 3);
    Problem p = make_problem({batch, s, t, dh * heads, heads}, seed, 1.0f, mask_kind, causal, offset, row_pad);
    if (uni(0, 4) == 0) p.scale = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);  // any finite scale
    INFO("seed " << seed << " B=" << batch << " S=" << s << " T=" << t << " H=" << heads << " Dh=" << dh
                 << " mask=" << int(mask_kind) << " causal=" << causal << " offset=" << offset << " row_pad=" << row_pad
                 << " scale=" << p.scale);
    const Outputs o = run_both(p, kernel);
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("kernels: q/k/v as slices of one packed (B, S, 3D) qkv buffer", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const uint64_t seed = 77;
  INFO("seed " << seed);
  const mha::AttentionShape shape{2, 37, 37, 96, 3};
  const std::vector<float> qkv =
      mha_test::random_tensor(size_t(shape.batch) * shape.seq_len * 3 * shape.d_model + 1, seed);
  const float* base = qkv.data() + 1;  // misaligned as well
  const int64_t row = 3 * shape.d_model, batch = shape.seq_len * row;
  for (bool causal : {false, true}) {
    mha::AttentionArgs a;
    a.shape = shape;
    a.q = {base, batch, row};
    a.k = {base + shape.d_model, batch, row};
    a.v = {base + 2 * shape.d_model, batch, row};
    a.causal = causal;
    a.scale = mha::default_scale(shape.head_dim());
    std::vector<float> ref(size_t(shape.q_elements())), fast(ref.size());
    a.out = mha::dense_view(ref.data(), shape.seq_len, shape.d_model);
    REQUIRE(mha::reference_attention(a) == mha::Status::kOk);
    a.out = mha::dense_view(fast.data(), shape.seq_len, shape.d_model);
    mha::Workspace ws;
    REQUIRE(mha::attention(a, ws, kernel) == mha::Status::kOk);
    require_close(ref, fast, kTol);
  }
}

TEST_CASE("kernels: longer sequences cross several key tiles and query blocks", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (const auto& c : {std::make_tuple(1, 200, 333, 128, 2, false, MaskKind::kNone),
                        std::make_tuple(1, 300, 300, 64, 1, true, MaskKind::kNone),
                        std::make_tuple(2, 150, 130, 96, 3, true, MaskKind::kRandom),
                        std::make_tuple(1, 129, 257, 65, 1, false, MaskKind::kKeyPadding),
                        std::make_tuple(1, 260, 70, 48, 2, true, MaskKind::kFullyMaskedRows),
                        // 8 heads: units of 600 rows (10 blocks) against 6 key tiles of 128, causal and masked
                        std::make_tuple(2, 600, 700, 256, 4, true, MaskKind::kRandom)}) {
    const uint64_t seed = 1000 + std::get<1>(c);
    INFO("seed " << seed << " S=" << std::get<1>(c) << " T=" << std::get<2>(c) << " D=" << std::get<3>(c));
    const Problem p = make_problem({std::get<0>(c), std::get<1>(c), std::get<2>(c), std::get<3>(c), std::get<4>(c)},
                                   seed, 1.0f, std::get<6>(c), std::get<5>(c));
    const Outputs o = run_both(p, kernel);
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("kernels: fully masked rows are NaN, the other rows are untouched by them", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  Problem p = make_problem({2, 9, 11, 12, 3}, 5, 1.0f, MaskKind::kRandom);
  for (int j = 0; j < 11; ++j) p.mask[(0 * 9 + 4) * 11 + j] = 0;  // row (b=0, i=4) sees nothing
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 11; ++j) p.mask[(1 * 9 + i) * 11 + j] = 0;  // batch 1 sees nothing at all
  const Outputs o = run_both(p, kernel);
  for (int c = 0; c < 12; ++c) REQUIRE(std::isnan(o.fast[4 * 12 + c]));
  for (size_t n = 9 * 12; n < o.fast.size(); ++n) REQUIRE(std::isnan(o.fast[n]));
  require_close(o.ref, o.fast, kTol);
}

TEST_CASE("kernels: rows that see nothing in the first key tiles but something later", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  // Other rows of the same query block do see the early keys, so those tiles are processed while these
  // rows still have no running max (exp(-inf - -inf) must not turn into NaN).
  Problem p = make_problem({1, 20, 150, 16, 1}, 61, 1.0f, MaskKind::kRandom);
  for (int i = 0; i < 20; i += 2)
    for (int j = 0; j < 140; ++j) p.mask[size_t(i) * 150 + j] = 0;
  p.mask[size_t(4) * 150 + 149] = 0;
  for (int j = 140; j < 149; ++j) p.mask[size_t(4) * 150 + j] = 0;  // row 4 sees nothing at all
  const Outputs o = run_both(p, kernel);
  for (int c = 0; c < 16; ++c) REQUIRE(std::isnan(o.fast[4 * 16 + c]));
  for (int i = 0; i < 20; ++i)
    if (i != 4) REQUIRE(std::isfinite(o.fast[i * 16]));
  require_close(o.ref, o.fast, kTol);
}

TEST_CASE("kernels: causal with S < T and S > T, alone and with a mask", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (auto st : {std::make_pair(5, 40), std::make_pair(40, 5), std::make_pair(70, 69), std::make_pair(1, 70)}) {
    for (MaskKind mk : {MaskKind::kNone, MaskKind::kRandom, MaskKind::kKeyPadding}) {
      const uint64_t seed = 31 * st.first + st.second;
      INFO("seed " << seed << " S=" << st.first << " T=" << st.second << " mask " << int(mk));
      const Problem p = make_problem({2, st.first, st.second, 16, 2}, seed, 1.0f, mk, true);
      const Outputs o = run_both(p, kernel);
      require_close(o.ref, o.fast, kTol);
    }
  }
}

TEST_CASE("kernels: non-finite inputs", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  const mha::AttentionShape shape{1, 12, 20, 16, 2};
  SECTION("NaN in q poisons exactly that row of that head") {
    Problem p = make_problem(shape, 11);
    p.q_at(0, 3, 9) = kNaN;  // head 1
    const Outputs o = run_both(p, kernel);
    for (int c = 8; c < 16; ++c) REQUIRE(std::isnan(o.fast[3 * 16 + c]));
    for (int c = 0; c < 8; ++c) REQUIRE(std::isfinite(o.fast[3 * 16 + c]));
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("NaN or inf in a visible key poisons every row that sees it") {
    for (float bad : {kNaN, kInf, -kInf}) {
      INFO("bad value " << bad);
      Problem p = make_problem(shape, 12, 1.0f, MaskKind::kNone, true);
      p.k_at(0, 7, 2) = bad;  // head 0, key 7: seen by rows >= 7 only
      const Outputs o = run_both(p, kernel);
      require_close(o.ref, o.fast, kTol);
      for (int i = 0; i < 7; ++i) REQUIRE(std::isfinite(o.fast[i * 16]));
    }
  }
  SECTION("NaN in a visible value poisons that column only") {
    Problem p = make_problem(shape, 13);
    p.v_at(0, 5, 3) = kNaN;
    const Outputs o = run_both(p, kernel);
    for (int i = 0; i < 12; ++i) {
      REQUIRE(std::isnan(o.fast[i * 16 + 3]));
      REQUIRE(std::isfinite(o.fast[i * 16 + 4]));
    }
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("inf/NaN in k and v behind the mask or the causal edge never leak") {
    Problem p = make_problem(shape, 14, 1.0f, MaskKind::kKeyPadding, true);
    for (int c = 0; c < 16; ++c) {
      p.k_at(0, 19, c) = kNaN;  // hide key 19 from everyone via the mask
      p.v_at(0, 19, c) = c % 2 ? kInf : kNaN;
      p.v_at(0, 11, c) = -kInf;  // key 11 is visible (if the padding allows) only to row 11 (causal)
    }
    for (int i = 0; i < 12; ++i) p.mask[size_t(i) * 20 + 19] = 0;
    for (int i = 0; i < 12; ++i) p.mask[size_t(i) * 20 + 0] = 1;  // every row sees key 0
    const Outputs o = run_both(p, kernel);
    for (int i = 0; i < 11; ++i)
      for (int c = 0; c < 16; ++c) REQUIRE(std::isfinite(o.fast[i * 16 + c]));
    require_close(o.ref, o.fast, kTol);
  }
}

TEST_CASE("kernels: huge logits stay finite and correct (max subtraction)", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  SECTION("q, k ~ 1e3: softmax is one-hot, exp(score) alone would overflow") {
    const Problem p = make_problem({2, 33, 41, 64, 2}, 21, 1e3f);
    const Outputs o = run_both(p, kernel);
    for (float x : o.fast) REQUIRE(std::isfinite(x));
    require_close(o.ref, o.fast, kTol);
  }
  SECTION("every score near +1000 with O(1) differences") {
    Problem p = make_problem({1, 20, 30, 32, 1}, 22);
    for (int j = 0; j < 30; ++j) p.k_at(0, j, 0) = 1000.0f / p.scale;  // q[0] = 1 below: score += 1000
    for (int i = 0; i < 20; ++i) p.q_at(0, i, 0) = 1.0f;
    const Outputs o = run_both(p, kernel);
    for (float x : o.fast) REQUIRE(std::isfinite(x));
    // A float score near 1000 carries an absolute error of ~1000 * eps * few, which moves the weights by
    // as much relative; PyTorch float32 has the same. Allow 1000 * 2^-23 * 32.
    require_close(o.ref, o.fast, 1000.0f * 32.0f * std::numeric_limits<float>::epsilon());
  }
}

TEST_CASE("kernels: all-equal logits give the mean of V; seq 1 gives V itself", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  Problem p = make_problem({1, 7, 45, 24, 2}, 23);
  for (int i = 0; i < 7; ++i)
    for (int c = 0; c < 24; ++c) p.q_at(0, i, c) = 0.0f;
  const Outputs o = run_both(p, kernel);
  for (int c = 0; c < 24; ++c) {
    double mean = 0.0;
    for (int j = 0; j < 45; ++j) mean += p.v_at(0, j, c);
    mean /= 45.0;
    for (int i = 0; i < 7; ++i) REQUIRE(std::fabs(o.fast[i * 24 + c] - mean) <= 1e-5 * std::max(1.0, std::fabs(mean)));
  }

  const Problem one = make_problem({3, 1, 1, 20, 4}, 24);
  const Outputs o1 = run_both(one, kernel);
  for (int b = 0; b < 3; ++b)
    for (int c = 0; c < 20; ++c) REQUIRE(o1.fast[b * 20 + c] == one.v_at(b, 0, c));  // p = exp(0) = 1, l = 1: exact
}

// ---------------------------------------------------------------------------------------------------
// Units: order, split, scratch

// A worker's scratch for `plan`, 64-byte aligned, filled with NaN: a unit must not depend on what an
// earlier unit left there.
struct DirtyScratch {
  std::vector<float> buffer;
  float* data;
  size_t floats;
  explicit DirtyScratch(const mha::KernelPlan& plan) : buffer(plan.scratch.total + 16), floats(plan.scratch.total) {
    data = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buffer.data()) + 63) / 64 * 64);
    poison();
  }
  void poison() { std::fill(data, data + floats, kNaN); }
};

TEST_CASE("kernels: units in shuffled order and in other splits give bit-identical results", "[kernels][units]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (uint64_t seed : {31u, 32u, 33u}) {
    INFO("seed " << seed);
    const bool causal = seed != 32;
    // seed 33: several key tiles (T = 290) as well as several blocks per unit
    const Problem p = make_problem({2, 150, seed == 33 ? 290 : 90, 40, 4}, seed, 1.0f,
                                   seed == 33 ? MaskKind::kRandom : MaskKind::kNone, causal);
    std::vector<float> whole, shuffled, resplit;
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(whole), ws, kernel) == mha::Status::kOk);

    mha::AttentionArgs a = p.args(shuffled);
    const mha::KernelPlan plan = kernel.plan(a);
    std::vector<int64_t> order(static_cast<size_t>(plan.unit_count));
    for (int64_t u = 0; u < plan.unit_count; ++u) order[size_t(u)] = u;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    DirtyScratch scratch(plan);
    for (int64_t u : order) {
      scratch.poison();
      kernel.run_unit(a, plan, mha::plan_unit(p.shape, plan, u), scratch.data);
    }
    REQUIRE(bit_equal(whole, shuffled));

    // Units of 1, 2, 3, ... rows (never more than rows_per_unit): every row still sees the same floats.
    a = p.args(resplit);
    const int32_t kv_heads = p.shape.num_heads / plan.heads_per_kv_head;
    for (int32_t b = 0; b < p.shape.batch; ++b)
      for (int32_t g = 0; g < kv_heads; ++g) {
        int32_t size = 1;
        for (int32_t i = 0; i < p.shape.seq_len; i += size, size = size % plan.rows_per_unit + 1) {
          kernel.run_unit(a, plan, mha::WorkUnit{b, g, i, std::min(i + size, p.shape.seq_len)}, scratch.data);
        }
      }
    REQUIRE(bit_equal(whole, resplit));
  }
}

// Runs attention with out = q itself (same buffer and strides) and returns the result, read back from
// the q buffer in dense (B, S, D) order.
std::vector<float> attention_into_q(const Problem& p, mha::Workspace& ws, const mha::KernelVariant& kernel) {
  std::vector<float> unused;
  Problem in_place = p;  // its own copy of q, overwritten by the result
  mha::AttentionArgs a = in_place.args(unused);
  float* q = in_place.q.data() + in_place.offset;
  a.out = {q, in_place.q_batch_stride(), in_place.row_stride()};
  REQUIRE(mha::attention(a, ws, kernel) == mha::Status::kOk);
  std::vector<float> result;
  for (int b = 0; b < p.shape.batch; ++b)
    for (int i = 0; i < p.shape.seq_len; ++i)
      for (int c = 0; c < p.shape.d_model; ++c) result.push_back(in_place.q_at(b, i, c));
  return result;
}

TEST_CASE("kernels: out may be q itself, with the bits of a separate out", "[kernels][units]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha::Workspace ws;
  SECTION("several units and key tiles, masks with fully hidden rows, causal, strided and misaligned q") {
    for (uint64_t seed : {41u, 42u, 43u}) {
      INFO("seed " << seed);
      const Problem p =
          make_problem({2, 150, 290, 40, 4}, seed, 1.0f, seed == 42 ? MaskKind::kFullyMaskedRows : MaskKind::kRandom,
                       seed != 41, seed == 43 ? 3 : 0, seed == 43 ? 5 : 0);
      std::vector<float> separate;
      REQUIRE(mha::attention(p.args(separate), ws, kernel) == mha::Status::kOk);
      REQUIRE(bit_equal(attention_into_q(p, ws, kernel), separate));
    }
  }
  SECTION("rows redone by the reference (non-finite q, overflowing logits) read q before it is overwritten") {
    Problem p = make_problem({1, 70, 90, 32, 2}, 44);
    p.q_at(0, 5, 3) = kNaN;    // head 0 of row 5: NaN
    p.q_at(0, 9, 20) = 3e38f;  // head 1 of row 9: q.k overflows to inf
    p.q_at(0, 66, 1) = kInf;
    std::vector<float> separate;
    REQUIRE(mha::attention(p.args(separate), ws, kernel) == mha::Status::kOk);
    const std::vector<float> in_q = attention_into_q(p, ws, kernel);
    REQUIRE(std::isnan(separate[5 * 32 + 3]));
    REQUIRE(bit_equal(in_q, separate));
  }
  SECTION("a scale the kernel cannot fold runs on the reference, row by row, also in place") {
    Problem p = make_problem({2, 20, 30, 24, 3}, 45, 1.0f, MaskKind::kRandom, true);
    p.scale = 3e-39f;  // subnormal once log2(e) is folded in
    std::vector<float> separate;
    REQUIRE(mha::attention(p.args(separate), ws, kernel) == mha::Status::kOk);
    REQUIRE(bit_equal(attention_into_q(p, ws, kernel), separate));
  }
}

TEST_CASE("kernels: units cover every (batch, head, row) exactly once", "[kernels][units]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (const mha::AttentionShape& shape : {mha::AttentionShape{2, 5, 5, 12, 3}, mha::AttentionShape{3, 200, 7, 64, 4},
                                           mha::AttentionShape{1, 64, 64, 8, 1}, mha::AttentionShape{1, 65, 1, 8, 2},
                                           mha::AttentionShape{1, 3000, 3000, 64, 1}}) {
    mha::AttentionArgs args;
    args.shape = shape;
    const mha::KernelPlan plan = kernel.plan(args);
    INFO("S " << shape.seq_len << ": " << plan.unit_count << " units of " << plan.rows_per_unit << " rows");
    REQUIRE(plan.head_dim == shape.head_dim());
    REQUIRE(plan.rows_per_block <= plan.rows_per_unit + 3);
    std::vector<int> seen(size_t(shape.batch) * shape.num_heads * shape.seq_len, 0);
    for (int64_t u = 0; u < plan.unit_count; ++u) {
      const mha::WorkUnit unit = mha::plan_unit(shape, plan, u);
      REQUIRE(unit.q_begin < unit.q_end);
      REQUIRE(unit.q_end - unit.q_begin <= plan.rows_per_unit);
      for (int32_t hg = 0; hg < plan.heads_per_kv_head; ++hg) {
        const int32_t head = unit.kv_head * plan.heads_per_kv_head + hg;
        for (int i = unit.q_begin; i < unit.q_end; ++i)
          ++seen[(size_t(unit.batch) * shape.num_heads + head) * shape.seq_len + i];
      }
    }
    for (int x : seen) REQUIRE(x == 1);
  }
}

TEST_CASE("kernels: scratch does not grow with S or T", "[kernels][units]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  auto scratch_floats = [&kernel](mha::AttentionShape shape, bool causal) {
    mha::AttentionArgs args;
    args.shape = shape;
    args.causal = causal;
    return kernel.plan(args).scratch.total;
  };
  for (bool causal : {false, true}) {
    const size_t small = scratch_floats({1, 8, 8, 768, 12}, causal);
    const size_t big = scratch_floats({1, 100000, 200000, 768, 12}, causal);
    const size_t mid = scratch_floats({4, 2048, 2048, 768, 12}, causal);
    REQUIRE(big == mid);
    REQUIRE(small <= big);
    REQUIRE(big < 160 * 1024);  // a fixed tile: under 640 KiB per worker at Dh = 64 (1024 rows of Q and O)
  }
}

TEST_CASE("kernels: numHeads = 1 on per-head copies equals the multi-head kernel bit for bit", "[kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (bool causal : {false, true}) {
    const Problem p = make_problem({2, 67, 45, 3 * 20, 3}, 41, 1.0f, MaskKind::kRandom, causal, 1, 5);
    std::vector<float> multi;
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(multi), ws, kernel) == mha::Status::kOk);
    for (int h = 0; h < 3; ++h) {
      Problem single = make_problem({2, 67, 45, 20, 1}, 0);
      single.mask = p.mask;
      single.causal = causal;
      single.scale = p.scale;
      for (int b = 0; b < 2; ++b) {
        for (int i = 0; i < 67; ++i)
          for (int c = 0; c < 20; ++c) single.q_at(b, i, c) = p.q_at(b, i, h * 20 + c);
        for (int j = 0; j < 45; ++j)
          for (int c = 0; c < 20; ++c) {
            single.k_at(b, j, c) = p.k_at(b, j, h * 20 + c);
            single.v_at(b, j, c) = p.v_at(b, j, h * 20 + c);
          }
      }
      std::vector<float> one;
      REQUIRE(mha::attention(single.args(one), ws, kernel) == mha::Status::kOk);
      for (int b = 0; b < 2; ++b)
        for (int i = 0; i < 67; ++i)
          REQUIRE(std::memcmp(&one[(size_t(b) * 67 + i) * 20], &multi[(size_t(b) * 67 + i) * 60 + h * 20],
                              20 * sizeof(float)) == 0);
    }
  }
}
