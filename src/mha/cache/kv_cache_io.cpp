#include "mha/cache/kv_cache_io.hpp"

#include <algorithm>
#include <cstring>

#include "mha/cache/cache_codecs.hpp"
#include "mha/core/f16.hpp"

namespace mha {
namespace {

// The format is little-endian; elements are copied in host order, so a big-endian host would write another
// format (no target of this project is one).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "docs/cache-format.md is little-endian");

// "MHAKV", then CR LF and DOS's end of file (PNG's trick): a transfer in text mode that rewrites line
// endings, or a type/cat that stops at ^Z, changes the magic and so is reported as what it is.
constexpr uint8_t kMagic[8] = {'M', 'H', 'A', 'K', 'V', '\r', '\n', 0x1a};

// Byte offsets of the fixed header (docs/cache-format.md, "Layout"); the lengths follow it.
enum Field : int64_t {
  kVersionAt = 8,
  kHeaderBytesAt = 12,
  kDTypeAt = 16,
  kBatchAt = 20,
  kKvHeadsAt = 24,
  kHeadDimAt = 28,
  kValueDimAt = 32,
  kCapacityAt = 36,
  kFlagsAt = 40,
  kReservedAt = 44,
  kLengthsAt = 48,
};
constexpr int64_t kChecksumBytes = 4;
// The oldest version holding a dtype: version 2 added bfloat16 and int8.
uint32_t format_version(CacheDType dtype) {
  return dtype == CacheDType::kFloat32 || dtype == CacheDType::kFloat16 ? kCacheFormatFirstVersion
                                                                        : kCacheFormatVersion;
}

uint32_t read_u32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}
void write_u32(uint8_t* p, uint32_t x) { std::memcpy(p, &x, 4); }

// One element at a byte address of the save (memcpy: a save's elements need not be aligned in memory).
template <typename E>
E load_element(const uint8_t* p) {
  E x;
  std::memcpy(&x, p, sizeof(E));
  return x;
}
template <typename E>
void store_element(uint8_t* p, E x) {
  std::memcpy(p, &x, sizeof(E));
}

// The panel transposes read (or write) with a stride of 32 elements: vectorized, they become lane-by-lane
// inserts, more code and no faster (measured: scalar is 0.7 kB gzipped smaller per module, same times).
#if defined(__clang__)
#define MHA_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#else
#define MHA_SCALAR_LOOP
#endif

// ---- Messages: `why` in the API's terms, with numbers (no printf: it would pull musl's formatter into the
// modules). Cold: out of line and, with clang (the wasm builds), compiled for size.
#if defined(__clang__)
#define MHA_MINSIZE __attribute__((minsize))
#else
#define MHA_MINSIZE
#endif
#define MHA_COLD __attribute__((noinline, cold)) MHA_MINSIZE
struct Why {
  LoadMessage* message;
  MHA_COLD void put(char c) {
    if (message != nullptr && message->length < LoadMessage::kCapacity - 1) {
      message->text[message->length++] = c;
      message->text[message->length] = 0;
    }
  }
  MHA_COLD Why& operator<<(const char* s) {
    while (*s != 0) put(*s++);
    return *this;
  }
  MHA_COLD Why& operator<<(int64_t x) {
    char digits[24];
    int n = 0;
    uint64_t u = x < 0 ? uint64_t{0} - uint64_t(x) : uint64_t(x);
    do digits[n++] = char('0' + u % 10);
    while ((u /= 10) != 0);
    if (x < 0) put('-');
    while (n > 0) put(digits[--n]);
    return *this;
  }
  Why& operator<<(int32_t x) { return *this << int64_t{x}; }
  Why& operator<<(uint32_t x) { return *this << int64_t{x}; }
  MHA_COLD Why& hex(uint32_t x) {
    *this << "0x";
    for (int shift = 28; shift >= 0; shift -= 4) put("0123456789abcdef"[(x >> shift) & 0xf]);
    return *this;
  }
};

const char* dtype_name(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kFloat16: return "float16";
    case CacheDType::kBFloat16: return "bfloat16";
    case CacheDType::kInt8: return "int8";
    case CacheDType::kFloat32: break;
  }
  return "float32";
}
int64_t element_size(CacheDType dtype) { return cache_element_bytes(dtype); }

// Bytes of one token's k and v over all KV heads: Hkv * (Dh + Dv) elements (int8: and their float32
// scales, Hkv * (NBk + NBv)), up to 2^69 for int32 dims: a double, exact below 2^53 (and for a cache that
// exists, below 2^31).
double token_bytes(const KVCacheConfig& c) {
  const double scales = c.dtype == CacheDType::kInt8 ? 4.0 * (q8::blocks(c.head_dim) + q8::blocks(c.value_dim())) : 0.0;
  return double(c.num_kv_heads) *
         ((double(c.head_dim) + double(c.value_dim())) * double(element_size(c.dtype)) + scales);
}

// One sequence's part of a save: k (L, Hkv*Dh) and v (L, Hkv*Dv) elements, then for int8 the scales,
// k's (L, Hkv*NBk) and v's (L, Hkv*NBv) float32 (docs/cache-format.md). Byte offsets from its start.
struct SequenceParts {
  int64_t k_row, v_row, k_scale_row, v_scale_row;  // bytes per token
  int64_t v_at, k_scales_at, v_scales_at, end;
};
SequenceParts sequence_parts(const KVCacheConfig& c, int32_t length) {
  const int64_t e = element_size(c.dtype), hkv = c.num_kv_heads;
  const bool int8 = c.dtype == CacheDType::kInt8;
  SequenceParts p;
  p.k_row = hkv * c.head_dim * e, p.v_row = hkv * c.value_dim() * e;
  p.k_scale_row = int8 ? hkv * q8::blocks(c.head_dim) * 4 : 0,
  p.v_scale_row = int8 ? hkv * q8::blocks(c.value_dim()) * 4 : 0;
  p.v_at = length * p.k_row;
  p.k_scales_at = p.v_at + length * p.v_row;
  p.v_scales_at = p.k_scales_at + length * p.k_scale_row;
  p.end = p.v_scales_at + length * p.v_scale_row;
  return p;
}

// Tokens [0, length) of one KV head: its K^T panels (kv_cache.hpp: (ceil(capacity / 32), Dh, 32)) to
// token-major rows `stride` bytes apart (Dh elements each). Each (Dh, 32) panel is a tile of 32 tokens,
// transposed while it sits in L1 (4 KiB for Dh 64 in halves); the rows are written whole.
template <typename E>
void keys_out(const E* panels, int32_t length, int32_t dh, int64_t stride, uint8_t* out) {
  for (int32_t j0 = 0; j0 < length; j0 += kKeysPerPanel) {
    const E* panel = panels + key_panel_offset(j0, 0, dh);
    const int32_t count = std::min(kKeysPerPanel, length - j0);
    for (int32_t i = 0; i < count; ++i) {
      uint8_t* row = out + int64_t{j0 + i} * stride;
      MHA_SCALAR_LOOP
      for (int32_t d = 0; d < dh; ++d) store_element<E>(row + int64_t{d} * sizeof(E), panel[d * kKeysPerPanel + i]);
    }
  }
}

// The reverse: token-major rows into the panels (whose other columns stay as they are: zero).
template <typename E>
void keys_in(E* panels, int32_t length, int32_t dh, int64_t stride, const uint8_t* in) {
  for (int32_t j0 = 0; j0 < length; j0 += kKeysPerPanel) {
    E* panel = panels + key_panel_offset(j0, 0, dh);
    const int32_t count = std::min(kKeysPerPanel, length - j0);
    for (int32_t i = 0; i < count; ++i) {
      const uint8_t* row = in + int64_t{j0 + i} * stride;
      MHA_SCALAR_LOOP
      for (int32_t d = 0; d < dh; ++d) panel[d * kKeysPerPanel + i] = load_element<E>(row + int64_t{d} * sizeof(E));
    }
  }
}

// The first token of a (length, width) block of halves that holds an inf or NaN, or kNoSpecialValues.
int32_t first_special_token(const uint8_t* halves, int32_t length, int64_t width) {
  for (int32_t j = 0; j < length; ++j) {
    const uint8_t* row = halves + j * width * 2;
    uint16_t any = 0;  // OR of (h & inf bits) == inf bits, branch-free so that the loop vectorizes
    for (int64_t i = 0; i < width; ++i) any |= f16::is_special(load_element<uint16_t>(row + i * 2)) ? 1 : 0;
    if (any != 0) return j;
  }
  return kNoSpecialValues;
}

}  // namespace

int32_t SavedCacheHeader::length(int32_t b) const { return static_cast<int32_t>(read_u32(lengths + int64_t{b} * 4)); }

int64_t KVCacheStorage::saved_bytes(const KVCache& cache) {
  const KVCacheConfig& c = cache.config();
  int64_t tokens = 0;
  for (int32_t b = 0; b < c.batch; ++b) tokens += cache.length(b);
  return kLengthsAt + int64_t{c.batch} * 4 + tokens * static_cast<int64_t>(token_bytes(c)) + kChecksumBytes;
}

Status KVCacheStorage::save(const KVCache& cache, uint8_t* dst, int64_t size) {
  if (dst == nullptr) return Status::kNullPointer;
  if (size != saved_bytes(cache)) return Status::kCacheBadLength;
  const KVCacheConfig& c = cache.config();
  std::memcpy(dst, kMagic, sizeof kMagic);
  const uint32_t fields[] = {format_version(c.dtype),
                             uint32_t(kLengthsAt + int64_t{c.batch} * 4),
                             uint32_t(c.dtype),
                             uint32_t(c.batch),
                             uint32_t(c.num_kv_heads),
                             uint32_t(c.head_dim),
                             uint32_t(c.value_dim()),
                             uint32_t(c.capacity),
                             0,
                             0};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) write_u32(dst + kVersionAt + 4 * int64_t(i), fields[i]);
  for (int32_t b = 0; b < c.batch; ++b) write_u32(dst + kLengthsAt + int64_t{b} * 4, uint32_t(cache.length(b)));
  uint8_t* at = dst + kLengthsAt + int64_t{c.batch} * 4;
  const int64_t e = element_size(c.dtype), dh = c.head_dim, dv = c.value_dim();
  const int32_t nbk = cache.key_scale_blocks(), nbv = cache.value_scale_blocks();
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = cache.length(b);
    const SequenceParts part = sequence_parts(c, length);
    uint8_t* k_out = at;
    uint8_t* v_out = at + part.v_at;
    for (int32_t g = 0; g < c.num_kv_heads; ++g) {
      switch (e) {
        case 4: keys_out(cache.key_panels<float>(b, g), length, c.head_dim, part.k_row, k_out + g * dh * e); break;
        case 2: keys_out(cache.key_panels<uint16_t>(b, g), length, c.head_dim, part.k_row, k_out + g * dh * e); break;
        default: keys_out(cache.key_panels<int8_t>(b, g), length, c.head_dim, part.k_row, k_out + g * dh * e); break;
      }
      // V rows are Dv8 elements in the storage: the first Dv of each go out.
      const uint8_t* rows = e == 4   ? reinterpret_cast<const uint8_t*>(cache.value_rows<float>(b, g))
                            : e == 2 ? reinterpret_cast<const uint8_t*>(cache.value_rows<uint16_t>(b, g))
                                     : reinterpret_cast<const uint8_t*>(cache.value_rows<int8_t>(b, g));
      const int64_t row_bytes = int64_t{cache.value_row_elements()} * e;
      for (int32_t j = 0; j < length; ++j)
        std::memcpy(v_out + j * part.v_row + g * dv * e, rows + j * row_bytes, size_t(dv * e));
      if (c.dtype != CacheDType::kInt8) continue;
      // Key scales sit in (panels, NBk, P) per head (kv_cache.hpp), value scales in (capacity, NBv).
      const float* key_scales = cache.key_scales(b, g);
      const float* value_scales = cache.value_scales(b, g);
      for (int32_t j = 0; j < length; ++j) {
        uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
        for (int32_t nb = 0; nb < nbk; ++nb)
          store_element<float>(ks + nb * 4,
                               key_scales[(int64_t{j / kKeysPerPanel} * nbk + nb) * kKeysPerPanel + j % kKeysPerPanel]);
        std::memcpy(at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4,
                    value_scales + int64_t{j} * nbv, size_t(nbv) * 4);
      }
    }
    at += part.end;
  }
  write_u32(at, crc32(dst, at - dst));
  return Status::kOk;
}

// The int8 part of a save holds what a quantization makes (cache_codecs.hpp): scales finite and not
// negative (their sign bit clear), values in [-127, 127], and only zeros in a block whose scale is 0.
MHA_MINSIZE bool int8_values_valid(const KVCacheConfig& c, const SavedCacheHeader& h, const uint8_t* bytes, Why& say) {
  const uint8_t* at = bytes + kLengthsAt + int64_t{c.batch} * 4;
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.length(b);
    const SequenceParts part = sequence_parts(c, length);
    for (int side = 0; side < 2; ++side) {  // k, then v
      const int32_t dim = side == 0 ? c.head_dim : c.value_dim(), nb_count = q8::blocks(dim);
      const uint8_t* values = at + (side == 0 ? 0 : part.v_at);
      const uint8_t* scales = at + (side == 0 ? part.k_scales_at : part.v_scales_at);
      for (int64_t row = 0; row < int64_t{length} * c.num_kv_heads; ++row) {
        for (int32_t nb = 0; nb < nb_count; ++nb) {
          const uint32_t scale = read_u32(scales + (row * nb_count + nb) * 4);
          bool ok = scale < 0x7f800000u;  // finite, sign clear
          const int32_t first = nb * q8::kQuantBlock, last = std::min(dim, first + q8::kQuantBlock);
          for (int32_t d = first; d < last && ok; ++d) {
            const int8_t q = static_cast<int8_t>(values[row * dim + d]);
            ok = q != -128 && (scale != 0 || q == 0);
          }
          if (!ok) {
            say << "sequence " << b << ", token " << row / c.num_kv_heads << ", KV head " << row % c.num_kv_heads
                << ": the " << (side == 0 ? "k" : "v") << " block " << nb << " (scale ";
            say.hex(scale) << ") is not what an int8 quantization stores (a finite scale >= 0, values in [-127, 127], "
                              "all 0 when the scale is 0)";
            return false;
          }
        }
      }
    }
    at += part.end;
  }
  return true;
}

// minsize: the checks are cold, their messages most of the code (crc32 and fill keep the file's -O2).
MHA_MINSIZE Status KVCacheStorage::check(const uint8_t* bytes, int64_t size, int32_t capacity, SavedCacheHeader& h,
                                         LoadMessage* why) {
  if (why != nullptr) why->clear();
  Why say{why};
  const Status bad = Status::kCacheBadSave;
  if ((bytes == nullptr && size > 0) || size < 0) {
    say << "no bytes";
    return Status::kNullPointer;
  }
  // The smallest save: batch 1, no tokens.
  constexpr int64_t kSmallest = kLengthsAt + 4 + kChecksumBytes;
  auto too_short = [&]() {
    say << size << " bytes, shorter than the smallest saved KV cache (" << kSmallest << " bytes)";
    return bad;
  };
  if (size >= int64_t{sizeof kMagic} && std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    say << "bytes 0..7 are not the mha-wasm KV cache magic (\"MHAKV\\r\\n\\x1a\")";
    if (std::memcmp(bytes, kMagic, 5) == 0) {
      say << "; they begin with MHAKV, so the line endings were likely rewritten (the bytes went through a text-mode "
             "transfer or file: keep them binary)";
    }
    return bad;
  }
  if (size < kVersionAt + 4) return too_short();
  const uint32_t version = read_u32(bytes + kVersionAt);
  if (version < kCacheFormatFirstVersion || version > kCacheFormatVersion) {
    say << "version " << version << ", this build reads versions " << kCacheFormatFirstVersion << " and "
        << kCacheFormatVersion << " (docs/cache-format.md)";
    return bad;
  }
  if (size < kSmallest) return too_short();

  const uint32_t dtype = read_u32(bytes + kDTypeAt);
  if (dtype > 3) {
    say << "dtype " << dtype << " is not a KV cache dtype (0 float32, 1 float16, 2 bfloat16, 3 int8)";
    return bad;
  }
  if (format_version(static_cast<CacheDType>(dtype)) != version) {
    say << "dtype " << dtype << " (" << dtype_name(static_cast<CacheDType>(dtype)) << ") in a version " << version
        << " save; save() writes float32 and float16 as version 1, bfloat16 and int8 as version 2";
    return bad;
  }
  const struct {
    const char* name;
    int64_t at;
  } dims[] = {{"batch", kBatchAt},
              {"numKvHeads", kKvHeadsAt},
              {"headDim", kHeadDimAt},
              {"vHeadDim", kValueDimAt},
              {"capacity", kCapacityAt}};
  int32_t value[5];
  for (int i = 0; i < 5; ++i) {
    value[i] = static_cast<int32_t>(read_u32(bytes + dims[i].at));
    if (value[i] <= 0) {
      say << dims[i].name << " is " << value[i] << " (bytes " << dims[i].at << ".." << dims[i].at + 3
          << "), expected a positive integer";
      return bad;
    }
  }
  const uint32_t flags = read_u32(bytes + kFlagsAt), reserved = read_u32(bytes + kReservedAt);
  if (flags != 0 || reserved != 0) {
    say << "bytes 40..47 (flags, reserved) are ";
    say.hex(flags) << ", ";
    say.hex(reserved) << ", expected 0 (a feature of a later format?)";
    return bad;
  }
  const int32_t batch = value[0], saved_capacity = value[4];
  const int64_t header_bytes = kLengthsAt + int64_t{batch} * 4;
  const uint32_t header_field = read_u32(bytes + kHeaderBytesAt);
  if (header_field != header_bytes) {
    say << "the header says it is " << header_field << " bytes long, the header of a batch of " << batch << " is "
        << header_bytes;
    return bad;
  }
  if (size < header_bytes + kChecksumBytes) {
    say << size << " bytes, shorter than the header and checksum of a batch of " << batch << " ("
        << header_bytes + kChecksumBytes << " bytes)";
    return bad;
  }
  KVCacheConfig c;
  c.batch = batch;
  c.num_kv_heads = value[1];
  c.head_dim = value[2];
  c.v_head_dim = value[3] == value[2] ? 0 : value[3];  // as createKVCache makes it: 0 = Dh
  c.capacity = saved_capacity;
  c.dtype = static_cast<CacheDType>(dtype);
  h.lengths = bytes + kLengthsAt;
  int64_t tokens = 0;  // < 2^31 * 2^31
  int32_t longest = 0, longest_b = 0;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t length = h.length(b);
    if (length < 0 || length > saved_capacity) {
      say << "lengths[" << b << "] is " << length << ", outside [0, capacity = " << saved_capacity << "]";
      return bad;
    }
    if (length > longest) longest = length, longest_b = b;
    tokens += length;
  }
  // The exact size, in double: exact up to 2^53, and any larger total cannot equal a size (int64 could
  // overflow: tokens * token_bytes reaches 2^97).
  const double total = double(header_bytes) + double(tokens) * token_bytes(c) + double(kChecksumBytes);
  if (total != double(size)) {
    say << size << " bytes, a cache of these dims and lengths is ";
    if (total < 0x1p53)
      say << int64_t(total);
    else
      say << "more than 2^53";
    say << (total > double(size) ? " (truncated?)" : " (extra bytes after it?)");
    return bad;
  }
  const uint32_t stored = read_u32(bytes + size - kChecksumBytes), computed = crc32(bytes, size - kChecksumBytes);
  if (stored != computed) {
    say << "checksum mismatch: the CRC-32 of bytes 0.." << size - kChecksumBytes - 1 << " is ";
    say.hex(computed) << ", the last 4 bytes say ";
    say.hex(stored) << " (the bytes were changed)";
    return bad;
  }

  if (c.dtype == CacheDType::kInt8 && !int8_values_valid(c, h, bytes, say)) return bad;

  // The bytes are a save; now the cache to make of them.
  if (capacity < 0) {
    say << "expected a positive integer (0: the saved capacity, " << saved_capacity << "), got " << capacity;
    return Status::kNonPositiveDim;
  }
  if (capacity > 0 && capacity < longest) {
    say << "expected at least the longest saved sequence, lengths[" << longest_b << "] = " << longest << ", got "
        << capacity;
    return Status::kCacheBadLength;
  }
  if (capacity > 0) c.capacity = capacity;
  if (validate_cache_config(c) != Status::kOk) {  // the dims are positive and the dtype known: the size
    say << "a " << dtype_name(c.dtype) << " cache of batch " << c.batch << ", numKvHeads " << c.num_kv_heads
        << ", headDim " << c.head_dim << ", vHeadDim " << c.value_dim() << " and capacity " << c.capacity << " needs "
        << int64_t(kv_cache_bytes(c) < 0x1p62 ? kv_cache_bytes(c) : 0x1p62)
        << " bytes of wasm memory for its keys and values, "
        << "more than it can provide (2 GiB at most)";
    return Status::kCacheTooLarge;
  }
  h.config = c;
  h.saved_capacity = saved_capacity;
  h.max_length = longest;
  h.tokens_offset = header_bytes;
  return Status::kOk;
}

template <typename E>
void KVCacheStorage::fill(KVCache& cache, const SavedCacheHeader& h, const uint8_t* bytes) {
  const KVCacheConfig& c = cache.config_;
  const int64_t e = sizeof(E), dh = c.head_dim, dv = c.value_dim(), hkv = c.num_kv_heads;
  const int64_t dv8 = cache.value_row_elements();
  const int32_t nbk = cache.key_scale_blocks(), nbv = cache.value_scale_blocks();
  const uint8_t* at = bytes + h.tokens_offset;
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.length(b);
    const SequenceParts part = sequence_parts(c, length);
    const uint8_t* k_in = at;
    const uint8_t* v_in = at + part.v_at;
    for (int32_t g = 0; g < c.num_kv_heads; ++g) {
      const int64_t head = cache.head_index(b, g);
      keys_in(static_cast<E*>(cache.keys_) + head * cache.panels_ * cache.panel_elements(), length, c.head_dim,
              part.k_row, k_in + g * dh * e);
      E* rows = static_cast<E*>(cache.values_) + head * c.capacity * dv8;  // lanes [Dv, Dv8) stay zero
      for (int32_t j = 0; j < length; ++j)
        std::memcpy(rows + j * dv8, v_in + j * part.v_row + g * dv * e, size_t(dv * e));
      if (c.dtype != CacheDType::kInt8) continue;
      for (int32_t j = 0; j < length; ++j) {
        const uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
        float* key_scales = cache.key_scale_row(b, g, j);
        for (int32_t nb = 0; nb < nbk; ++nb) key_scales[nb * kKeysPerPanel] = load_element<float>(ks + nb * 4);
        std::memcpy(cache.value_scale_row(b, g, j), at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4,
                    size_t(nbv) * 4);
      }
    }
    at += part.end;
    cache.lengths_[size_t(b)] = length;
    if (c.dtype == CacheDType::kFloat16) {
      // Exact here (a cache's own special_from may be smaller: it is conservative).
      cache.special_from_[size_t(b)] =
          std::min(first_special_token(k_in, length, hkv * dh), first_special_token(v_in, length, hkv * dv));
    }
  }
}

Status KVCacheStorage::load(const uint8_t* bytes, int64_t size, int32_t capacity, std::unique_ptr<KVCache>& out,
                            LoadMessage* why) {
  out.reset();
  SavedCacheHeader header;
  Status status = check(bytes, size, capacity, header, why);
  if (status != Status::kOk) return status;
  std::unique_ptr<KVCache> cache;
  status = KVCache::create(header.config, cache);
  if (status != Status::kOk) {
    Why{why} << "the heap cannot hold a cache of " << int64_t(kv_cache_bytes(header.config))
             << " bytes of keys and values";
    return status;
  }
  switch (element_size(header.config.dtype)) {
    case 4: fill<float>(*cache, header, bytes); break;
    case 2: fill<uint16_t>(*cache, header, bytes); break;
    default: fill<int8_t>(*cache, header, bytes); break;
  }
  out = std::move(cache);
  return Status::kOk;
}

}  // namespace mha
