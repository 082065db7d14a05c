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
int32_t SavedCacheHeader::count(int32_t b) const {
  return stored != nullptr ? static_cast<int32_t>(read_u32(stored + int64_t{b} * 4)) : length(b);
}

int64_t KVCacheStorage::saved_bytes(const KVCache& cache) {
  const KVCacheConfig& c = cache.config();
  int64_t tokens = 0;
  for (int32_t b = 0; b < c.batch; ++b) tokens += cache.stored(b);
  return header_bytes(c.batch, c.ring) + tokens * static_cast<int64_t>(token_bytes(c)) + kChecksumBytes;
}

namespace {

// A sequence's saved tokens: `count` of them from position `first`, saved token t in slot t (a plain
// cache) or in slot (first + t) % capacity (a ring).
struct SavedRun {
  int32_t count, first, capacity;
  bool ring;
  int32_t slot(int32_t t) const { return ring ? (first + t) % capacity : t; }
};

// A ring's keys, token by token (a plain cache's go through keys_out/keys_in's panel transposes): element
// d of saved token t of KV head g is at row t, column g*Dh + d of the saved keys (`stride` bytes a row).
void ring_keys(const SavedRun& run, const uint8_t* panels, uint8_t* saved, int32_t dh, int64_t stride, int64_t e,
               bool out) {
  for (int32_t t = 0; t < run.count; ++t)
    for (int32_t d = 0; d < dh; ++d) {
      uint8_t* in_panel = const_cast<uint8_t*>(panels) + key_panel_offset(run.slot(t), d, dh) * e;
      uint8_t* in_save = saved + t * stride + d * e;
      std::memcpy(out ? in_save : in_panel, out ? in_panel : in_save, size_t(e));
    }
}

// The scales of KV head g of one sequence (a scaled codec's): key scales sit in (panels, NBk, P) per head
// (kv_cache.hpp), value scales in (capacity, NBv); saved token-major (SequenceParts).
void write_scales(const KVCache& cache, int32_t b, int32_t g, const SavedRun& run, const SequenceParts& part,
                  uint8_t* at) {
  const KVCacheConfig& c = cache.config();
  const int32_t nbk = cache.key_scale_blocks(), nbv = cache.value_scale_blocks();
  const float* key_scales = cache.key_scales(b, g);
  const float* value_scales = cache.value_scales(b, g);
  for (int32_t j = 0; j < run.count; ++j) {
    uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
    for (int32_t nb = 0; nb < nbk; ++nb)
      store_element<float>(ks + nb * 4, key_scales[key_scale_offset(run.slot(j), nb * kScaleBlock, c.head_dim)]);
    std::memcpy(at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4,
                value_scales + value_scale_offset(run.slot(j), 0, c.value_dim()), size_t(nbv) * 4);
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

// int4 (codec_int4.hpp): a saved head row packs its values in pairs, low nibble first, as a stored value
// row does (so a value row is saved as its first ceil(Dv / 2) bytes), while a key panel row holds 32 keys'
// nibbles: keys go nibble by nibble. `out`: from the cache into the save, else back.
void int4_head(const SavedRun& run, const uint8_t* panels, const uint8_t* rows, const KVCacheConfig& c, int64_t dv8,
               uint8_t* k_save, uint8_t* v_save, const SequenceParts& part, bool out) {
  const int32_t dh = c.head_dim;
  const int64_t v_bytes = head_row_bytes(c.dtype, c.value_dim());
  for (int32_t t = 0; t < run.count; ++t) {
    const int32_t slot = run.slot(t);
    uint8_t* k_row = k_save + t * part.k_row;
    if (out && dh % 2 != 0) k_row[dh / 2] = 0;  // an odd Dh's unused nibble (the save's bytes are the caller's)
    for (int32_t d = 0; d < dh; ++d) {
      const q4::NibbleAt at = q4::key_nibble(slot, d, dh);
      uint8_t* in_panel = const_cast<uint8_t*>(panels) + at.byte;
      if (out) {
        q4::set_nibble(k_row[d / 2], d % 2 != 0, q4::nibble(*in_panel, at.high));
      } else {
        q4::set_nibble(*in_panel, at.high, q4::nibble(k_row[d / 2], d % 2 != 0));
      }
    }
    uint8_t* in_rows = const_cast<uint8_t*>(rows) + slot * dv8 / 2;
    uint8_t* in_save = v_save + t * part.v_row;
    std::memcpy(out ? in_save : in_rows, out ? in_rows : in_save, size_t(v_bytes));
  }
}

// The tokens of every sequence, per sequence: k, v, and the scales of a scaled dtype (SequenceParts).
void write_tokens(const KVCache& cache, uint8_t* at) {
  const KVCacheConfig& c = cache.config();
  const bool scaled = cache_dtype_info(c.dtype).scaled;
  const int64_t e = cache_dtype_info(c.dtype).element_bits / 8, dh = c.head_dim, dv = c.value_dim();
  for (int32_t b = 0; b < c.batch; ++b) {
    const SavedRun run{cache.stored(b), cache.length(b) - cache.stored(b), c.capacity, c.ring};
    const SequenceParts part = sequence_parts(c, run.count);
    uint8_t* k_out = at;
    uint8_t* v_out = at + part.v_at;
    for (int32_t g = 0; g < c.num_kv_heads; ++g) {
      if (e == 0) {  // int4
        int4_head(run, cache.key_panels<uint8_t>(b, g), cache.value_rows<uint8_t>(b, g), c, cache.value_row_elements(),
                  k_out + g * head_row_bytes(c.dtype, c.head_dim), v_out + g * head_row_bytes(c.dtype, c.value_dim()),
                  part, true);
        write_scales(cache, b, g, run, part, at);
        continue;
      }
      if (c.ring) {
        ring_keys(run, static_cast<const uint8_t*>(cache.head_block(b, g, 0).key_panels), k_out + g * dh * e,
                  c.head_dim, part.k_row, e, true);
      } else {
        head_keys_out(cache, e, b, g, run.count, part.k_row, k_out + g * dh * e);
      }
      // V rows are Dv8 elements in the storage: the first Dv of each go out.
      const uint8_t* rows = head_value_bytes(cache, e, b, g);
      const int64_t row_bytes = int64_t{cache.value_row_elements()} * e;
      for (int32_t j = 0; j < run.count; ++j)
        std::memcpy(v_out + j * part.v_row + g * dv * e, rows + run.slot(j) * row_bytes, size_t(dv * e));
      if (scaled) write_scales(cache, b, g, run, part, at);
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
  const uint32_t fields[] = {format_version(c),        uint32_t(header_bytes(c.batch, c.ring)),
                             uint32_t(c.dtype),        uint32_t(c.batch),
                             uint32_t(c.num_kv_heads), uint32_t(c.head_dim),
                             uint32_t(c.value_dim()),  uint32_t(c.capacity),
                             c.ring ? kRingFlag : 0,   0};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) write_u32(dst + kVersionAt + 4 * int64_t(i), fields[i]);
  for (int32_t b = 0; b < c.batch; ++b) {
    write_u32(dst + kLengthsAt + int64_t{b} * 4, uint32_t(cache.length(b)));
    if (c.ring) write_u32(dst + kLengthsAt + (int64_t{c.batch} + b) * 4, uint32_t(cache.stored(b)));
  }
  uint8_t* tokens = dst + header_bytes(c.batch, c.ring);
  write_tokens(cache, tokens);
  uint8_t* end = dst + size - kChecksumBytes;
  write_u32(end, crc32(dst, end - dst));
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
    const SavedRun run{h.count(b), h.length(b) - h.count(b), c.capacity, c.ring};
    const SequenceParts part = sequence_parts(c, run.count);
    const uint8_t* k_in = at;
    const uint8_t* v_in = at + part.v_at;
    for (int32_t g = 0; g < c.num_kv_heads; ++g) {
      E* panels = cache.writable_key_panels<E>(b, g);
      E* rows = cache.writable_value_rows<E>(b, g);  // lanes [Dv, Dv8) stay zero
      if constexpr (Codec::kElementBits == 4) {
        int4_head(run, panels, rows, c, dv8, const_cast<uint8_t*>(k_in + g * head_row_bytes(c.dtype, c.head_dim)),
                  const_cast<uint8_t*>(v_in + g * head_row_bytes(c.dtype, c.value_dim())), part, false);
      } else if (c.ring) {
        ring_keys(run, reinterpret_cast<uint8_t*>(panels), const_cast<uint8_t*>(k_in + g * dh * e), c.head_dim,
                  part.k_row, e, false);
      } else {
        keys_in(panels, run.count, c.head_dim, part.k_row, k_in + g * dh * e);
      }
      if constexpr (Codec::kElementBits != 4) {
        for (int32_t j = 0; j < run.count; ++j)
          std::memcpy(rows + run.slot(j) * dv8, v_in + j * part.v_row + g * dv * e, size_t(dv * e));
      }
      if (!Codec::kScaled) continue;
      float* key_scales = cache.writable_key_scales(b, g);
      float* value_scales = cache.writable_value_scales(b, g);
      for (int32_t j = 0; j < run.count; ++j) {
        const uint8_t* ks = at + part.k_scales_at + j * part.k_scale_row + int64_t{g} * nbk * 4;
        for (int32_t nb = 0; nb < nbk; ++nb)
          key_scales[key_scale_offset(run.slot(j), nb * kScaleBlock, c.head_dim)] = load_element<float>(ks + nb * 4);
        std::memcpy(value_scales + value_scale_offset(run.slot(j), 0, c.value_dim()),
                    at + part.v_scales_at + j * part.v_scale_row + int64_t{g} * nbv * 4, size_t(nbv) * 4);
      }
    }
    at += part.end;
    int32_t special_from = kNoSpecialValues;
    if constexpr (Codec::kTracksSpecials) {
      special_from = std::min(first_special_token<Codec>(k_in, run.count, hkv * dh),
                              first_special_token<Codec>(v_in, run.count, hkv * dv));
      // A ring's saved token t is not slot t: any inf/NaN half makes the whole ring conservative.
      if (c.ring && special_from != kNoSpecialValues) special_from = 0;
    }
    cache.set_loaded(b, h.length(b), run.count, special_from);
  }
}

}  // namespace

Status KVCacheStorage::load(const uint8_t* bytes, int64_t size, int32_t capacity, std::unique_ptr<KVCache>& out,
                            LoadMessage* why, bool integer) {
  out.reset();
  SavedCacheHeader header;
  Status status = check(bytes, size, capacity, header, why);
  if (status != Status::kOk) return status;
  header.config.integer = integer;
  if (validate_cache_config(header.config) == Status::kCacheBadArithmetic) {
    Why{why} << "'integer' needs an int8 or int4 cache, and the save holds a " << dtype_name(header.config.dtype)
             << " cache";
    return Status::kCacheBadArithmetic;
  }
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
