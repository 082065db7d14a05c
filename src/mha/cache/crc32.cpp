// CRC-32 of the saved KV cache format (kv_cache_io.hpp, docs/cache-format.md), apart from its reader and
// writer.
#include <cstring>

#include "mha/cache/kv_cache_io.hpp"

namespace mha {
namespace {

uint32_t read_u32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// ---- CRC-32, slicing by 8 (Intel's method, as zlib): 8 bytes per step through 8 tables of 256 entries.
// The tables (8 KiB) are computed at the first use rather than stored: they would add 8 KiB of
// incompressible data to every wasm module.
constexpr uint32_t kCrcPolynomial = 0xEDB88320u;  // reflected

struct CrcTables {
  uint32_t t[8][256];
  uint32_t x2n[32];  // x^(2^k) mod P, for crc_shift
  CrcTables();
};

// a(x) * b(x) mod P in the reflected representation (zlib's multmodp): bit 31 is x^0.
uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = uint32_t{1} << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kCrcPolynomial : b >> 1;
  }
  return p;
}

CrcTables::CrcTables() {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? kCrcPolynomial ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  uint32_t p = uint32_t{1} << 30;  // x^1
  x2n[0] = p;
  for (int k = 1; k < 32; ++k) x2n[k] = p = multiply_mod_p(p, p);
}

const CrcTables& crc_tables() {
  static const CrcTables tables;
  return tables;
}

// x^(8 * bytes) mod P: what a CRC is multiplied by when `bytes` more bytes follow (crc32_combine).
uint32_t crc_shift(const CrcTables& tables, int64_t bytes) {
  uint32_t p = uint32_t{1} << 31;  // x^0
  for (int k = 3; bytes != 0; bytes >>= 1, ++k)
    if (bytes & 1) p = multiply_mod_p(tables.x2n[k & 31], p);
  return p;
}

// One slicing-by-8 step of a pre-inverted CRC over 8 bytes.
inline uint32_t crc_step8(const uint32_t (&t)[8][256], uint32_t crc, const uint8_t* data) {
  const uint32_t lo = read_u32(data) ^ crc, hi = read_u32(data + 4);
  return t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
         t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
}

}  // namespace

uint32_t crc32(const uint8_t* data, int64_t size, uint32_t crc) {
  const CrcTables& tables = crc_tables();
  const auto& t = tables.t;
  // Four independent CRCs of four equal parts, joined as zlib's crc32_combine does (CRC(A B) =
  // CRC(A) x^(8 |B|) + CRC(B) mod P): one CRC is bound by the latency of its lookups, four interleaved keep
  // the loads busy (8 MiB: 4.8 -> 3.2 ms in wasm, 4.2 -> 1.4 ms natively).
  constexpr int kStreams = 4;
  const int64_t part = size / kStreams / 8 * 8;
  if (part >= 256) {
    uint32_t c0 = ~crc, c1 = ~0u, c2 = ~0u, c3 = ~0u;
    for (int64_t i = 0; i < part; i += 8) {
      c0 = crc_step8(t, c0, data + i);
      c1 = crc_step8(t, c1, data + part + i);
      c2 = crc_step8(t, c2, data + 2 * part + i);
      c3 = crc_step8(t, c3, data + 3 * part + i);
    }
    const uint32_t shift = crc_shift(tables, part);
    crc = multiply_mod_p(shift, ~c0) ^ ~c1;
    crc = multiply_mod_p(shift, crc) ^ ~c2;
    crc = multiply_mod_p(shift, crc) ^ ~c3;
    data += kStreams * part;
    size -= kStreams * part;
  }
  crc = ~crc;
  for (; size >= 8; size -= 8, data += 8) crc = crc_step8(t, crc, data);
  for (; size > 0; --size, ++data) crc = t[0][(crc ^ *data) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace mha
