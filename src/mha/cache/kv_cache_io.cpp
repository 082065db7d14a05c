#include "mha/cache/kv_cache_io.hpp"

#include <algorithm>
#include <cstring>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/kv_cache_format.hpp"

namespace mha {
using namespace saved_format;  // kv_cache_format.hpp: this file's alone
namespace {

// The panel transposes read (or write) with a stride of 32 elements: vectorized, they become lane-by-lane
// inserts, more code and no faster (measured: scalar is 0.7 kB gzipped smaller per module, same times).
#if defined(__clang__)
#define MHA_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#else
#define MHA_SCALAR_LOOP
#endif

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

// The first token of a (length, width) block of elements (halves) that holds an inf or NaN, or
// kNoSpecialValues (Codec::kTracksSpecials).
template <typename Codec>
int32_t first_special_token(const uint8_t* elements, int32_t length, int64_t width) {
  using E = typename Codec::Element;
  for (int32_t j = 0; j < length; ++j) {
    const uint8_t* row = elements + j * width * int64_t{sizeof(E)};
    uint16_t any = 0;  // OR of (h & inf bits) == inf bits, branch-free so that the loop vectorizes
    for (int64_t i = 0; i < width; ++i) any |= Codec::is_special(load_element<E>(row + i * int64_t{sizeof(E)})) ? 1 : 0;
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

namespace {

// The scales of KV head g of one sequence (a scaled codec's): key scales sit in (panels, NBk, P) per head
// (kv_cache.hpp), value scales in (capacity, NBv); saved token-major (SequenceParts).
void write_scales(const KVCache& cache, int32_t b, int32_t g, int32_t length, const SequenceParts& part, uint8_t* at) {
  const KVCacheConfig& c = cache.config();
  const int32_t nbk = cache.key_scale_blocks(), nbv = cache.value_scale_blocks();
  const float* key_scales = cache.key_scales(b, g);
  const float* value_scales = cache.value_scales(b, g);
  for (int32_t j = 0; j < length; ++j) {
    uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
    for (int32_t nb = 0; nb < nbk; ++nb)
      store_element<float>(ks + nb * 4, key_scales[key_scale_offset(j, nb * kScaleBlock, c.head_dim)]);
    std::memcpy(at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4,
                value_scales + value_scale_offset(j, 0, c.value_dim()), size_t(nbv) * 4);
  }
}

// KV head g of sequence b's keys out (keys_out) and its value rows' first byte, for an element of e bytes:
// the only steps of a save that depend on the element type.
void head_keys_out(const KVCache& cache, int64_t e, int32_t b, int32_t g, int32_t length, int64_t stride,
                   uint8_t* out) {
  const int32_t dh = cache.config().head_dim;
  switch (e) {
    case 1: keys_out(cache.key_panels<uint8_t>(b, g), length, dh, stride, out); break;
    case 2: keys_out(cache.key_panels<uint16_t>(b, g), length, dh, stride, out); break;
    default: keys_out(cache.key_panels<uint32_t>(b, g), length, dh, stride, out); break;
  }
}
const uint8_t* head_value_bytes(const KVCache& cache, int64_t e, int32_t b, int32_t g) {
  switch (e) {
    case 1: return cache.value_rows<uint8_t>(b, g);
    case 2: return reinterpret_cast<const uint8_t*>(cache.value_rows<uint16_t>(b, g));
    default: return reinterpret_cast<const uint8_t*>(cache.value_rows<uint32_t>(b, g));
  }
}

// The tokens of every sequence, per sequence: k, v, and the scales of a scaled dtype (SequenceParts).
void write_tokens(const KVCache& cache, uint8_t* at) {
  const KVCacheConfig& c = cache.config();
  const bool scaled = cache_dtype_info(c.dtype).scaled;
  const int64_t e = cache_element_bytes(c.dtype), dh = c.head_dim, dv = c.value_dim();
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = cache.length(b);
    const SequenceParts part = sequence_parts(c, length);
    uint8_t* k_out = at;
    uint8_t* v_out = at + part.v_at;
    for (int32_t g = 0; g < c.num_kv_heads; ++g) {
      head_keys_out(cache, e, b, g, length, part.k_row, k_out + g * dh * e);
      // V rows are Dv8 elements in the storage: the first Dv of each go out.
      const uint8_t* rows = head_value_bytes(cache, e, b, g);
      const int64_t row_bytes = int64_t{cache.value_row_elements()} * e;
      for (int32_t j = 0; j < length; ++j)
        std::memcpy(v_out + j * part.v_row + g * dv * e, rows + j * row_bytes, size_t(dv * e));
      if (scaled) write_scales(cache, b, g, length, part, at);
    }
    at += part.end;
  }
}

}  // namespace

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
  uint8_t* tokens = dst + kLengthsAt + int64_t{c.batch} * 4;
  write_tokens(cache, tokens);
  uint8_t* end = dst + size - kChecksumBytes;
  write_u32(end, crc32(dst, end - dst));
  return Status::kOk;
}

namespace {

// The scaled part of a save holds what an encode stores (Codec::stored_block_valid; int8: scales finite and
// not negative (their sign bit clear), values in [-127, 127], and only zeros in a block whose scale is 0).
template <typename Codec>
MHA_MINSIZE bool scaled_values_valid(const KVCacheConfig& c, const SavedCacheHeader& h, const uint8_t* bytes,
                                     Why& say) {
  const uint8_t* at = bytes + kLengthsAt + int64_t{c.batch} * 4;
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.length(b);
    const SequenceParts part = sequence_parts(c, length);
    for (int side = 0; side < 2; ++side) {  // k, then v
      const int32_t dim = side == 0 ? c.head_dim : c.value_dim(), nb_count = scale_blocks(dim);
      const uint8_t* values = at + (side == 0 ? 0 : part.v_at);
      const uint8_t* scales = at + (side == 0 ? part.k_scales_at : part.v_scales_at);
      for (int64_t row = 0; row < int64_t{length} * c.num_kv_heads; ++row) {
        for (int32_t nb = 0; nb < nb_count; ++nb) {
          const uint32_t scale = read_u32(scales + (row * nb_count + nb) * 4);
          const int32_t first = nb * kScaleBlock, last = std::min(dim, first + kScaleBlock);
          const auto* q = reinterpret_cast<const typename Codec::Element*>(values + row * dim + first);
          if (Codec::stored_block_valid(q, last - first, scale)) continue;
          say << "sequence " << b << ", token " << row / c.num_kv_heads << ", KV head " << row % c.num_kv_heads
              << ": the " << (side == 0 ? "k" : "v") << " block " << nb << " (scale ";
          say.hex(scale) << ") is not what an " << dtype_name(c.dtype) << " quantization stores (a finite scale >= 0, "
                         << "values in [-" << Codec::kMaxQ << ", " << Codec::kMaxQ << "], all 0 when the scale is 0)";
          return false;
        }
      }
    }
    at += part.end;
  }
  return true;
}

// ---- The checks of load, in the order the bytes are read (each says why through `say`).

// The input, the magic, the version (into *version) and the smallest size.
MHA_MINSIZE Status check_prefix(const uint8_t* bytes, int64_t size, uint32_t* version, Why& say) {
  if ((bytes == nullptr && size > 0) || size < 0) {
    say << "no bytes";
    return Status::kNullPointer;
  }
  // The smallest save: batch 1, no tokens.
  constexpr int64_t kSmallest = kLengthsAt + 4 + kChecksumBytes;
  auto too_short = [&]() {
    say << size << " bytes, shorter than the smallest saved KV cache (" << kSmallest << " bytes)";
    return Status::kCacheBadSave;
  };
  if (size >= int64_t{sizeof kMagic} && std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    say << "bytes 0..7 are not the mha-wasm KV cache magic (\"MHAKV\\r\\n\\x1a\")";
    if (std::memcmp(bytes, kMagic, 5) == 0) {
      say << "; they begin with MHAKV, so the line endings were likely rewritten (the bytes went through a text-mode "
             "transfer or file: keep them binary)";
    }
    return Status::kCacheBadSave;
  }
  if (size < kVersionAt + 4) return too_short();
  *version = read_u32(bytes + kVersionAt);
  if (*version < kCacheFormatFirstVersion || *version > kCacheFormatVersion) {
    say << "version " << *version << ", this build reads versions " << kCacheFormatFirstVersion << " and "
        << kCacheFormatVersion << " (docs/cache-format.md)";
    return Status::kCacheBadSave;
  }
  if (size < kSmallest) return too_short();
  return Status::kOk;
}

// "a, b and c" of the names of the table's dtypes that `take`.
template <typename Take>
MHA_MINSIZE void say_dtype_names(Why& say, Take take) {
  int32_t count = 0, said = 0;
  for (const CacheDTypeInfo& info : kCacheDTypes) count += take(info) ? 1 : 0;
  for (const CacheDTypeInfo& info : kCacheDTypes) {
    if (!take(info)) continue;
    say << (said == 0 ? "" : said + 1 == count ? " and " : ", ") << info.name;
    ++said;
  }
}

// The dtype field: a dtype of the table (cache_codecs.hpp), in the version that holds it.
MHA_MINSIZE Status check_dtype(uint32_t dtype, uint32_t version, Why& say) {
  if (dtype >= uint32_t(kCacheDTypeCount)) {
    say << "dtype " << dtype << " is not a KV cache dtype (";
    for (int32_t i = 0; i < kCacheDTypeCount; ++i) say << (i == 0 ? "" : ", ") << i << " " << kCacheDTypes[i].name;
    say << ")";
    return Status::kCacheBadSave;
  }
  if (format_version(static_cast<CacheDType>(dtype)) != version) {
    say << "dtype " << dtype << " (" << dtype_name(static_cast<CacheDType>(dtype)) << ") in a version " << version
        << " save; save() writes ";
    for (uint32_t v = kCacheFormatFirstVersion; v <= kCacheFormatVersion; ++v) {
      say << (v == kCacheFormatFirstVersion ? "" : ", ");
      say_dtype_names(say, [v](const CacheDTypeInfo& info) { return info.save_version == v; });
      say << " as version " << v;
    }
    return Status::kCacheBadSave;
  }
  return Status::kOk;
}

// The dims, flags and header size: *c (its capacity the saved one) and *header_bytes.
MHA_MINSIZE Status check_fields(const uint8_t* bytes, int64_t size, CacheDType dtype, KVCacheConfig* c,
                                int64_t* header_bytes, Why& say) {
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
      return Status::kCacheBadSave;
    }
  }
  const uint32_t flags = read_u32(bytes + kFlagsAt), reserved = read_u32(bytes + kReservedAt);
  if (flags != 0 || reserved != 0) {
    say << "bytes 40..47 (flags, reserved) are ";
    say.hex(flags) << ", ";
    say.hex(reserved) << ", expected 0 (a feature of a later format?)";
    return Status::kCacheBadSave;
  }
  const int32_t batch = value[0];
  *header_bytes = kLengthsAt + int64_t{batch} * 4;
  const uint32_t header_field = read_u32(bytes + kHeaderBytesAt);
  if (header_field != *header_bytes) {
    say << "the header says it is " << header_field << " bytes long, the header of a batch of " << batch << " is "
        << *header_bytes;
    return Status::kCacheBadSave;
  }
  if (size < *header_bytes + kChecksumBytes) {
    say << size << " bytes, shorter than the header and checksum of a batch of " << batch << " ("
        << *header_bytes + kChecksumBytes << " bytes)";
    return Status::kCacheBadSave;
  }
  c->batch = batch;
  c->num_kv_heads = value[1];
  c->head_dim = value[2];
  c->v_head_dim = value[3] == value[2] ? 0 : value[3];  // as createKVCache makes it: 0 = Dh
  c->capacity = value[4];
  c->dtype = dtype;
  return Status::kOk;
}

// The lengths (each in [0, capacity]), the exact size and the checksum; the longest sequence into h.
MHA_MINSIZE Status check_tokens(const uint8_t* bytes, int64_t size, const KVCacheConfig& c, int64_t header_bytes,
                                SavedCacheHeader& h, int32_t* longest_b, Why& say) {
  h.lengths = bytes + kLengthsAt;
  h.max_length = 0;
  int64_t tokens = 0;  // < 2^31 * 2^31
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.length(b);
    if (length < 0 || length > c.capacity) {
      say << "lengths[" << b << "] is " << length << ", outside [0, capacity = " << c.capacity << "]";
      return Status::kCacheBadSave;
    }
    if (length > h.max_length) h.max_length = length, *longest_b = b;
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
    return Status::kCacheBadSave;
  }
  const uint32_t stored = read_u32(bytes + size - kChecksumBytes), computed = crc32(bytes, size - kChecksumBytes);
  if (stored != computed) {
    say << "checksum mismatch: the CRC-32 of bytes 0.." << size - kChecksumBytes - 1 << " is ";
    say.hex(computed) << ", the last 4 bytes say ";
    say.hex(stored) << " (the bytes were changed)";
    return Status::kCacheBadSave;
  }
  return Status::kOk;
}

// The cache to make of a valid save: `capacity` (0: the saved one) into c, and whether the heap can hold it.
MHA_MINSIZE Status check_capacity(int32_t capacity, const SavedCacheHeader& h, int32_t longest_b, KVCacheConfig& c,
                                  Why& say) {
  if (capacity < 0) {
    say << "expected a positive integer (0: the saved capacity, " << c.capacity << "), got " << capacity;
    return Status::kNonPositiveDim;
  }
  if (capacity > 0 && capacity < h.max_length) {
    say << "expected at least the longest saved sequence, lengths[" << longest_b << "] = " << h.max_length << ", got "
        << capacity;
    return Status::kCacheBadLength;
  }
  if (capacity > 0) c.capacity = capacity;
  if (validate_cache_config(c) != Status::kOk) {  // the dims are positive and the dtype known: the size
    say << "a " << dtype_name(c.dtype) << " cache of batch " << c.batch << ", numKvHeads " << c.num_kv_heads
        << ", headDim " << c.head_dim << ", vHeadDim " << c.value_dim() << " and capacity " << c.capacity << " needs "
        << int64_t(kv_cache_bytes(c) < 0x1p62 ? kv_cache_bytes(c) : 0x1p62)
        << " bytes of wasm memory for its keys and values, "
        << "more than it can provide (4 GiB at most)";
    return Status::kCacheTooLarge;
  }
  return Status::kOk;
}

}  // namespace

// minsize: the checks are cold, their messages most of the code (crc32 and fill keep the file's -O2).
MHA_MINSIZE Status KVCacheStorage::check(const uint8_t* bytes, int64_t size, int32_t capacity, SavedCacheHeader& h,
                                         LoadMessage* why) {
  if (why != nullptr) why->clear();
  Why say{why};
  uint32_t version = 0;
  Status status = check_prefix(bytes, size, &version, say);
  if (status != Status::kOk) return status;
  const uint32_t dtype = read_u32(bytes + kDTypeAt);
  if ((status = check_dtype(dtype, version, say)) != Status::kOk) return status;
  KVCacheConfig c;
  int64_t header_bytes = 0;
  status = check_fields(bytes, size, static_cast<CacheDType>(dtype), &c, &header_bytes, say);
  if (status != Status::kOk) return status;
  int32_t longest_b = 0;
  if ((status = check_tokens(bytes, size, c, header_bytes, h, &longest_b, say)) != Status::kOk) return status;
  const bool values_valid = visit_codec(c.dtype, [&](auto codec) {
    if constexpr (decltype(codec)::kScaled) return scaled_values_valid<decltype(codec)>(c, h, bytes, say);
    return true;
  });
  if (!values_valid) return Status::kCacheBadSave;
  // The bytes are a save; now the cache to make of them.
  h.saved_capacity = c.capacity;
  if ((status = check_capacity(capacity, h, longest_b, c, say)) != Status::kOk) return status;
  h.config = c;
  h.tokens_offset = header_bytes;
  return Status::kOk;
}

namespace {

// Copies the checked save's tokens into a new, zeroed cache of header.config and sets its lengths and
// special_from (exact here: a cache's own may be smaller, it is conservative).
template <typename Codec>
void fill(KVCache& cache, const SavedCacheHeader& h, const uint8_t* bytes) {
  using E = typename Codec::Element;
  const KVCacheConfig& c = cache.config();
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
      keys_in(cache.writable_key_panels<E>(b, g), length, c.head_dim, part.k_row, k_in + g * dh * e);
      E* rows = cache.writable_value_rows<E>(b, g);  // lanes [Dv, Dv8) stay zero
      for (int32_t j = 0; j < length; ++j)
        std::memcpy(rows + j * dv8, v_in + j * part.v_row + g * dv * e, size_t(dv * e));
      if (!Codec::kScaled) continue;
      float* key_scales = cache.writable_key_scales(b, g);
      float* value_scales = cache.writable_value_scales(b, g);
      for (int32_t j = 0; j < length; ++j) {
        const uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
        for (int32_t nb = 0; nb < nbk; ++nb)
          key_scales[key_scale_offset(j, nb * kScaleBlock, c.head_dim)] = load_element<float>(ks + nb * 4);
        std::memcpy(value_scales + value_scale_offset(j, 0, c.value_dim()),
                    at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4, size_t(nbv) * 4);
      }
    }
    at += part.end;
    int32_t special_from = kNoSpecialValues;
    if constexpr (Codec::kTracksSpecials) {
      special_from = std::min(first_special_token<Codec>(k_in, length, hkv * dh),
                              first_special_token<Codec>(v_in, length, hkv * dv));
    }
    cache.set_loaded(b, length, special_from);
  }
}

}  // namespace

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
  visit_codec(header.config.dtype, [&](auto codec) { fill<decltype(codec)>(*cache, header, bytes); });
  out = std::move(cache);
  return Status::kOk;
}

}  // namespace mha
