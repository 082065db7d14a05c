// The checks of a load (docs/cache-format.md, "Checks"): every field of a save, its exact size and its
// checksum, read from untrusted bytes before anything is allocated, each refusal saying why in the API's
// terms (kv_cache_io.hpp). Cold: compiled for size (core/cold.hpp).
#include <algorithm>
#include <cstring>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/kv_cache_format.hpp"
#include "mha/cache/kv_cache_io.hpp"

namespace mha {
using namespace saved_format;  // kv_cache_format.hpp

namespace {

// The scaled part of a save holds what an encode stores (Codec::stored_block_valid; int8 and int4: scales
// finite and not negative (their sign bit clear), values in [-127, 127] or [-7, 7], only zeros in a block whose
// scale is 0, and int4's unused nibble of an odd row 0).
template <typename Codec>
MHA_MINSIZE bool scaled_values_valid(const KVCacheConfig& c, const SavedCacheHeader& h, const uint8_t* bytes,
                                     Why& say) {
  const uint8_t* at = bytes + h.tokens_offset;
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.count(b);
    const SequenceParts part = sequence_parts(c, length);
    for (int side = 0; side < 2; ++side) {  // k, then v
      const int32_t dim = side == 0 ? c.head_dim : c.value_dim(), nb_count = scale_blocks(dim);
      const uint8_t* values = at + (side == 0 ? 0 : part.v_at);
      const uint8_t* scales = at + (side == 0 ? part.k_scales_at : part.v_scales_at);
      for (int64_t row = 0; row < int64_t{length} * c.num_kv_heads; ++row) {
        for (int32_t nb = 0; nb < nb_count; ++nb) {
          const uint32_t scale = read_u32(scales + (row * nb_count + nb) * 4);
          const int32_t first = nb * kScaleBlock, last = std::min(dim, first + kScaleBlock);
          const auto* q = reinterpret_cast<const typename Codec::Element*>(values + row * head_row_bytes(c.dtype, dim) +
                                                                           cache_elements_bytes(c.dtype, first));
          if (Codec::stored_block_valid(q, last - first, scale)) continue;
          say << "sequence " << b << ", token " << row / c.num_kv_heads << ", KV head " << row % c.num_kv_heads
              << ": the " << (side == 0 ? "k" : "v") << " block " << nb << " (scale ";
          say.hex(scale) << ") is not what an " << dtype_name(c.dtype) << " quantization stores (a finite scale >= 0, "
                         << "values in [-" << Codec::kMaxQ << ", " << Codec::kMaxQ << "], all 0 when the scale is 0"
                         << (Codec::kElementBits == 4 ? ", an odd block's unused high nibble 0)" : ")");
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
    say << "version " << *version << ", this build reads versions " << kCacheFormatFirstVersion << " to "
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
  // Version 3 holds a ring of a dtype of versions 1 and 2 (its flag is checked with the other fields); a
  // dtype of version 4 (int4) is saved as version 4, ring or not.
  const uint32_t holds = format_version(static_cast<CacheDType>(dtype));
  if (holds != version && !(version == kRingVersion && holds < kRingVersion)) {
    say << "dtype " << dtype << " (" << dtype_name(static_cast<CacheDType>(dtype)) << ") in a version " << version
        << " save; save() writes ";
    for (uint32_t v = kCacheFormatFirstVersion; v <= kCacheFormatVersion; ++v) {
      if (v == kRingVersion) continue;
      say << (v == kCacheFormatFirstVersion ? "" : ", ");
      say_dtype_names(say, [v](const CacheDTypeInfo& info) { return info.save_version == v; });
      say << " as version " << v;
    }
    say << " (and ring caches of the version 1 and 2 dtypes as version " << kRingVersion << ")";
    return Status::kCacheBadSave;
  }
  return Status::kOk;
}

// The dims, flags and header size: *c (its capacity the saved one) and *header_bytes.
MHA_MINSIZE Status check_fields(const uint8_t* bytes, int64_t size, uint32_t version, CacheDType dtype,
                                KVCacheConfig* c, int64_t* header_bytes, Why& say) {
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
  // Flags: the ring bit, exactly in version 3 saves, and either way in version 4.
  const uint32_t flags = read_u32(bytes + kFlagsAt), reserved = read_u32(bytes + kReservedAt);
  const uint32_t expected_flags =
      version == kRingVersion || (version > kRingVersion && flags == kRingFlag) ? kRingFlag : 0;
  if (flags != expected_flags || reserved != 0) {
    say << "bytes 40..47 (flags, reserved) are ";
    say.hex(flags) << ", ";
    say.hex(reserved) << ", expected ";
    say.hex(expected_flags) << ", 0 in a version " << version << " save (a feature of a later format?)";
    return Status::kCacheBadSave;
  }
  const bool ring = flags == kRingFlag;
  const int32_t batch = value[0];
  *header_bytes = saved_format::header_bytes(batch, ring);
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
  c->ring = ring;
  return Status::kOk;
}

// The lengths (each in [0, capacity]; a ring's any, with stored counts in [0, min(length, capacity)]), the
// exact size and the checksum; the sequence with the most saved tokens into h.
MHA_MINSIZE Status check_tokens(const uint8_t* bytes, int64_t size, const KVCacheConfig& c, int64_t header_bytes,
                                SavedCacheHeader& h, int32_t* longest_b, Why& say) {
  h.lengths = bytes + kLengthsAt;
  h.stored = c.ring ? bytes + kLengthsAt + int64_t{c.batch} * 4 : nullptr;
  h.tokens_offset = header_bytes;
  h.max_length = 0;
  int64_t tokens = 0;  // < 2^31 * 2^31
  for (int32_t b = 0; b < c.batch; ++b) {
    const int32_t length = h.length(b), count = h.count(b);
    if (length < 0 || (!c.ring && length > c.capacity)) {
      say << "lengths[" << b << "] is " << length;
      if (c.ring) {
        say << ", expected at least 0";
      } else {
        say << ", outside [0, capacity = " << c.capacity << "]";
      }
      return Status::kCacheBadSave;
    }
    if (count < 0 || count > std::min(length, c.capacity)) {
      say << "stored[" << b << "] is " << count << ", outside [0, min(lengths[" << b << "] = " << length
          << ", capacity = " << c.capacity << ")]";
      return Status::kCacheBadSave;
    }
    if (count > h.max_length) h.max_length = count, *longest_b = b;
    tokens += count;
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
    say << "expected at least the longest saved sequence, " << (h.stored != nullptr ? "stored[" : "lengths[")
        << longest_b << "] = " << h.max_length << ", got " << capacity;
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
  status = check_fields(bytes, size, version, static_cast<CacheDType>(dtype), &c, &header_bytes, say);
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

}  // namespace mha
