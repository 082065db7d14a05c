#include "mha/reference/reference.hpp"

#include <cmath>
#include <limits>

#include "mha/core/numeric.hpp"
#include "mha/core/workspace.hpp"

namespace mha {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Entry d of head vector x rotated by the table row (c, s) (docs/spec.md 4.5), in double: the products
// of two floats are exact, so only the sum rounds.
double rotated(const float* x, int32_t d, const float* c, const float* s, const RotaryTables& rope) {
  if (d >= rope.rotary_dim) return double{x[d]};
  if (rope.interleaved) {
    const int32_t r = d / 2;
    return d % 2 == 0 ? double{x[d]} * c[r] - double{x[d + 1]} * s[r] : double{x[d]} * c[r] + double{x[d - 1]} * s[r];
  }
  const int32_t half = rope.rotary_dim / 2;
  return d < half ? double{x[d]} * c[d] - double{x[d + half]} * s[d]
                  : double{x[d]} * c[d - half] + double{x[d - half]} * s[d - half];
}

int64_t query_position(const ReferenceRow& row) { return int64_t{row.visibility.query_offset} + row.query; }

// The row's q rotated at its position into rotated_q (Dh doubles); nullptr without rope (q is read as is).
const double* rotate_query(const ReferenceRow& row, double* rotated_q) {
  if (!row.rope.enabled()) return nullptr;
  const int64_t table_row = row.rope.row_offset(query_position(row));
  for (int32_t d = 0; d < row.head_dim; ++d) {
    rotated_q[d] = rotated(row.q_row, d, row.rope.cos + table_row, row.rope.sin + table_row, row.rope);
  }
  return rotated_q;
}

// scale * (q . k_j): with rope, of the rotated q (rotated_q) and k_j rotated at position j.
double scaled_dot(const ReferenceRow& row, const double* rotated_q, int32_t j) {
  double dot = 0.0;
  if (row.k_rows == nullptr) {
    for (int32_t d = 0; d < row.head_dim; ++d)
      dot += double{row.q_row[d]} * double{row.reader.key(row.reader.source, j, d)};
    return dot * double{row.scale};
  }
  const float* k_row = row.k_rows + j * row.k_row_stride;
  if (rotated_q == nullptr) {
    for (int32_t d = 0; d < row.head_dim; ++d) dot += double{row.q_row[d]} * double{k_row[d]};
  } else {
    const int64_t table_row = row.rope.row_offset(j);
    const float* c = row.rope.cos + table_row;
    const float* s = row.rope.sin + table_row;
    for (int32_t d = 0; d < row.head_dim; ++d) dot += rotated_q[d] * rotated(k_row, d, c, s, row.rope);
  }
  return dot * double{row.scale};
}

double softcapped(const ReferenceRow& row, double s) {
  return row.softcap > 0.0f ? double{row.softcap} * std::tanh(s / double{row.softcap}) : s;
}

// ALiBi - slope * |p_i - j|, then + bias[b, h, i, j].
double biased(const ReferenceRow& row, double s, int32_t j) {
  if (row.alibi) s -= double{row.alibi_slope} * std::fabs(static_cast<double>(query_position(row)) - j);
  if (row.bias_row != nullptr) s += double{row.bias_row[j]};
  return s;
}

// The score of a visible key j, in double (docs/spec.md 2.4): s = scale * (q . k_j), then softcap
// c * tanh(s / c), then ALiBi - slope * |p_i - j|, then + bias[b, h, i, j].
double score(const ReferenceRow& row, const double* rotated_q, int32_t j) {
  return biased(row, softcapped(row, scaled_dot(row, rotated_q, j)), j);
}

// Calls fn(j) for every visible key j of the row, in increasing order.
template <typename Fn>
void for_each_visible_key(const ReferenceRow& row, Fn&& fn) {
  const KeyRange range = row.visibility.row_range(row.query);
  const uint8_t* mask_row = row.visibility.mask_row(row.query);
  for (int32_t j = range.begin; j < range.end; ++j) {
    if (mask_row == nullptr || mask_row[j] != 0) fn(j);
  }
}

}  // namespace

// 2^k * (1 + expm1(r)) with r = x - k ln2 in [-ln2/2, ln2/2] (ln2 in two parts, the first with
// enough trailing zeros that k * kLn2Hi is exact): within an ulp of std::exp (native check: 4M points over
// [-745, 710], at most 1 ulp apart, none apart after rounding to float). musl's exp brings a 2 kB table
// into every wasm module (1.8 kB gzipped); its expm1, which tanh needs anyway, has none.
double exp_without_table(double x) {
  if (!(x > -746.0)) return std::isnan(x) ? x : 0.0;  // below the least subnormal, or -inf
  if (x > 710.0) return std::numeric_limits<double>::infinity();
  constexpr double kInvLn2 = 0x1.71547652b82fep0;
  constexpr double kLn2Hi = 0x1.62e42fee00000p-1, kLn2Lo = 0x1.a39ef35793c76p-33;
  const double k = std::nearbyint(x * kInvLn2);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  return std::ldexp(1.0 + std::expm1(r), static_cast<int>(k));
}

void reference_attention_row(const ReferenceRow& row, double* scratch, float* out_row, float* weights_row, float* lse) {
  const int32_t value_dim = row.value_dim;
  const int32_t kv_seq_len = row.visibility.kv_seq_len;
  double* acc = scratch;
  const double* rotated_q = rotate_query(row, scratch + value_dim);
  // The row max over the visible keys (and the sink). std::fmax ignores NaN, so a NaN score cannot hide
  // the max; it still poisons the sum below.
  double row_max = kNegInfDouble;
  bool has_nan = false;
  for_each_visible_key(row, [&](int32_t j) {
    const double s = score(row, rotated_q, j);
    has_nan |= std::isnan(s);
    row_max = std::fmax(row_max, s);
  });

  // An empty row: no visible key, or only -inf scores (a -inf bias hides a key as the mask does). Its
  // softmax is 0/0 in PyTorch: NaN (emptyRows 'nan'), or 0 with 'zero'. A NaN score is no empty row.
  // With a sink the denominator is never 0: the sink takes the whole mass, and the output is 0.
  if (row_max == kNegInfDouble && !has_nan) {
    const float fill =
        row.empty_rows == EmptyRows::kZero || row.has_sink ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    if (out_row != nullptr) {
      for (int32_t d = 0; d < value_dim; ++d) out_row[d] = fill;
    }
    if (weights_row != nullptr) {
      for (int32_t j = 0; j < kv_seq_len; ++j) weights_row[j] = fill;
    }
    if (lse != nullptr) *lse = row.has_sink ? row.sink : -std::numeric_limits<float>::infinity();
    return;
  }
  if (row.has_sink) row_max = std::fmax(row_max, double{row.sink});

  // Softmax with the row max subtracted, so exp never overflows. Keys whose score is -inf have weight 0
  // and are never read (a non-finite v behind them cannot leak into the output; PyTorch would compute
  // 0 * inf = NaN there). Visible keys multiply as usual.
  double sum = row.has_sink ? exp_without_table(double{row.sink} - row_max) : 0.0;
  if (out_row != nullptr) {
    for (int32_t d = 0; d < value_dim; ++d) acc[d] = 0.0;
  }
  for_each_visible_key(row, [&](int32_t j) {
    const double s = score(row, rotated_q, j);
    if (s == kNegInfDouble) return;
    const double weight = exp_without_table(s - row_max);
    sum += weight;
    if (out_row == nullptr) return;
    if (row.v_rows == nullptr) {
      for (int32_t d = 0; d < value_dim; ++d) acc[d] += weight * double{row.reader.value(row.reader.source, j, d)};
      return;
    }
    const float* v_row = row.v_rows + j * row.v_row_stride;
    for (int32_t d = 0; d < value_dim; ++d) acc[d] += weight * double{v_row[d]};
  });
  if (out_row != nullptr) {
    for (int32_t d = 0; d < value_dim; ++d) out_row[d] = static_cast<float>(acc[d] / sum);
  }
  if (weights_row != nullptr) {
    // Hidden keys: exp(-inf) / sum, which is 0, or NaN when the row is NaN (as PyTorch's softmax).
    const float hidden_weight = static_cast<float>(0.0 / sum);
    for (int32_t j = 0; j < kv_seq_len; ++j) weights_row[j] = hidden_weight;
    for_each_visible_key(row, [&](int32_t j) {
      weights_row[j] = static_cast<float>(exp_without_table(score(row, rotated_q, j) - row_max) / sum);
    });
  }
  // log1p(sum - 1) rather than log(sum): the same number here (a finite sum is >= 1, the max's own term
  // (a key's or the sink's) being 1, and sum - 1 is exact below 2 and off by half an ulp of sum above,
  // i.e. 2^-53 in the log), and musl's log1p needs no table where its log brings a 4 kB one into every
  // wasm module.
  if (lse != nullptr) *lse = static_cast<float>(std::isnan(sum) ? kNaN : row_max + std::log1p(sum - 1.0));
}

void reference_scores_row(const ReferenceRow& row, ScoreStage stage, double* scratch, float* scores_row) {
  const double* rotated_q = rotate_query(row, scratch + row.value_dim);
  const int32_t kv_seq_len = row.visibility.kv_seq_len;
  if (stage == ScoreStage::kBiased) {
    for (int32_t j = 0; j < kv_seq_len; ++j) scores_row[j] = -std::numeric_limits<float>::infinity();
    for_each_visible_key(row, [&](int32_t j) { scores_row[j] = static_cast<float>(score(row, rotated_q, j)); });
    return;
  }
  for (int32_t j = 0; j < kv_seq_len; ++j) {
    const double s = scaled_dot(row, rotated_q, j);
    scores_row[j] = static_cast<float>(stage == ScoreStage::kSoftcapped ? softcapped(row, s) : s);
  }
}

namespace {

// The reference's view of query row i of head h of batch item b.
ReferenceRow row_of(const AttentionArgs& args, const KeyVisibility& visibility, int32_t batch, int32_t head,
                    int32_t query) {
  const AttentionShape& shape = args.shape;
  const int32_t head_dim = shape.head_dim();
  const int32_t kv_head = head / (shape.num_heads / shape.kv_heads());
  const int64_t q_offset = int64_t{head} * head_dim, k_offset = int64_t{kv_head} * head_dim;
  const int64_t v_offset = int64_t{kv_head} * shape.value_dim();
  ReferenceRow row;
  row.q_row = args.q.data + batch * args.q.batch_stride + query * args.q.row_stride + q_offset;
  row.k_rows = args.k.data + batch * args.k.batch_stride + k_offset;
  row.v_rows = args.v.data != nullptr ? args.v.data + batch * args.v.batch_stride + v_offset : nullptr;
  row.k_row_stride = args.k.row_stride;
  row.v_row_stride = args.v.row_stride;
  row.head_dim = head_dim;
  row.value_dim = shape.value_dim();
  row.scale = args.scale;
  row.visibility = visibility;
  row.query = query;
  row.softcap = args.softcap;
  row.alibi = args.alibi_slopes != nullptr;
  row.alibi_slope = row.alibi ? args.alibi_slopes[head] : 0.0f;
  if (args.bias.data != nullptr) {
    row.bias_row = args.bias.data + batch * args.bias.batch_stride + head * args.bias.head_stride +
                   int64_t{query} * shape.kv_seq_len;
  }
  row.empty_rows = args.empty_rows;
  row.has_sink = args.sinks != nullptr;
  row.sink = row.has_sink ? args.sinks[head] : 0.0f;
  row.rope = args.rope;
  return row;
}

float* out_row_of(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query) {
  return args.out.data + batch * args.out.batch_stride + query * args.out.row_stride +
         int64_t{head} * args.shape.value_dim();
}

float* lse_of(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query) {
  if (args.lse == nullptr) return nullptr;
  return args.lse + (int64_t{batch} * args.shape.num_heads + head) * args.shape.seq_len + query;
}

// Visits every (b, h, i) of the call with its ReferenceRow.
template <typename RowFn>
void for_each_query_row(const AttentionArgs& args, RowFn&& row_fn) {
  const AttentionShape& s = args.shape;
  for (int32_t b = 0; b < s.batch; ++b) {
    const KeyVisibility visibility = key_visibility(args, b);
    for (int32_t h = 0; h < s.num_heads; ++h) {
      for (int32_t i = 0; i < s.seq_len; ++i) row_fn(b, h, i, row_of(args, visibility, b, h, i));
    }
  }
}

// The row scratch of a call (reference_scratch_doubles) in `scratch`, as doubles in `doubles`.
bool reserve_doubles(const AttentionArgs& args, Workspace& scratch, double*& doubles) {
  const size_t count = reference_scratch_doubles(args.shape.head_dim(), args.shape.value_dim(), args.rope.enabled());
  if (!scratch.reserve(2 * count + 2)) return false;  // floats: 2 per double, and never an empty buffer
  doubles = reinterpret_cast<double*>(scratch.data());
  return true;
}

}  // namespace

void reference_attention_query(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query, double* acc) {
  reference_attention_row(row_of(args, key_visibility(args, batch), batch, head, query), acc,
                          out_row_of(args, batch, head, query), nullptr, lse_of(args, batch, head, query));
}

Status reference_attention(const AttentionArgs& args) {
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  double* acc = nullptr;
  Workspace scratch;
  if (!reserve_doubles(args, scratch, acc)) return Status::kOutOfMemory;
  for_each_query_row(args, [&](int32_t b, int32_t h, int32_t i, const ReferenceRow& row) {
    reference_attention_row(row, acc, out_row_of(args, b, h, i), nullptr, lse_of(args, b, h, i));
  });
  return Status::kOk;
}

Status reference_attention_weights(const AttentionArgs& args, float* weights, ScoreStage stage) {
  const Status status = validate_shape(args.shape, ScoreTensor::kWeights);
  if (status != Status::kOk) return status;
  if (args.q.data == nullptr || args.k.data == nullptr || weights == nullptr) return Status::kNullPointer;
  if (stage != ScoreStage::kScaled && stage != ScoreStage::kSoftcapped && stage != ScoreStage::kBiased &&
      stage != ScoreStage::kSoftmax) {
    return Status::kBadStage;
  }
  const Status options = validate_options(args);
  if (options != Status::kOk) return options;
  double* scratch_doubles = nullptr;
  Workspace scratch;
  if (!reserve_doubles(args, scratch, scratch_doubles)) return Status::kOutOfMemory;
  const AttentionShape& s = args.shape;
  for_each_query_row(args, [&](int32_t b, int32_t h, int32_t i, const ReferenceRow& row) {
    float* weights_row = weights + ((int64_t{b} * s.num_heads + h) * s.seq_len + i) * s.kv_seq_len;
    if (stage == ScoreStage::kSoftmax) {
      reference_attention_row(row, scratch_doubles, nullptr, weights_row, nullptr);
    } else {
      reference_scores_row(row, stage, scratch_doubles, weights_row);
    }
  });
  return Status::kOk;
}

}  // namespace mha
