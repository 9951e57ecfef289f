// SPDX-License-Identifier: Apache-2.0
#include "core/unwind/unwind_cache.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

namespace lw {

namespace {

constexpr char kMagic[8] = {'L', 'W', 'U', 'N', 'W', 'I', 'N', 'D'};
constexpr size_t kHeaderBytes = 48;
constexpr size_t kRowBytes = 12;
constexpr size_t kChecksumBytes = 4;

void put(std::string& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The same into a buffer already sized: the rows are most of a file
// (17 MB for libtorch_cpu), and push_back per byte showed in the bench.
char* put_at(char* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) *p++ = static_cast<char>((v >> (8 * i)) & 0xff);
  return p;
}

uint64_t get(std::string_view in, size_t pos, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(in[pos + i])} << (8 * i);
  return v;
}

uint32_t checksum(std::string_view bytes) {
  // crc32() takes a uInt length: feed it in pieces.
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - pos, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + pos), static_cast<uInt>(n));
    pos += n;
  }
  return static_cast<uint32_t>(crc);
}

Error refuse(const std::string& why) { return Error{EINVAL, "unwind cache: " + why}; }

}  // namespace

std::string serialize(const UnwindTable& table, std::string build_id, std::string_view identity) {
  if (build_id.size() > kUnwindCacheMaxBuildIdBytes || identity.size() > kUnwindCacheMaxIdentityBytes ||
      table.rows.size() > UINT32_MAX ||
      table.pages.size() > UINT32_MAX) {
    return "";
  }
  std::string out;
  out.reserve(kHeaderBytes + build_id.size() + identity.size() + table.rows.size() * kRowBytes +
              table.pages.size() * 4 + kChecksumBytes);
  out.append(kMagic, sizeof(kMagic));
  put(out, kUnwindCacheVersion, 4);
  put(out, static_cast<uint32_t>(table.stats.source), 4);
  put(out, table.stats.cfi.fdes, 8);
  put(out, table.stats.cfi.cies, 8);
  put(out, table.rows.size(), 4);
  put(out, table.pages.size(), 4);
  put(out, build_id.size(), 4);
  put(out, identity.size(), 4);
  out += build_id;
  out += identity;
  const size_t body = out.size();
  out.resize(body + table.rows.size() * kRowBytes + table.pages.size() * 4);
  char* p = out.data() + body;
  for (const lw_unwind_row& r : table.rows) {
    p = put_at(p, r.pc, 4);
    p = put_at(p, static_cast<uint32_t>(r.cfa_offset), 4);
    p = put_at(p, static_cast<uint16_t>(r.rbp_offset), 2);
    p = put_at(p, r.cfa_type, 1);
    p = put_at(p, r.rbp_type, 1);
  }
  for (uint32_t page : table.pages) p = put_at(p, page, 4);
  put(out, checksum(out), 4);
  return out;
}

Result<UnwindTable> parse_cached_table(std::string_view bytes, std::string_view expected_build_id,
                                       std::string_view expected_identity,
                                       const UnwindBuildLimits& limits) {
  if (bytes.size() < kHeaderBytes + kChecksumBytes) return refuse("truncated header");
  if (memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return refuse("bad magic");
  const uint64_t version = get(bytes, 8, 4);
  if (version != kUnwindCacheVersion) {
    return refuse("format version " + std::to_string(version) + " (this build reads " +
                  std::to_string(kUnwindCacheVersion) + ")");
  }
  const uint64_t source = get(bytes, 12, 4);
  const uint64_t nrows = get(bytes, 32, 4);
  const uint64_t npages = get(bytes, 36, 4);
  const uint64_t id_len = get(bytes, 40, 4);
  if (source > static_cast<uint64_t>(CfiSource::kDebugFrame)) return refuse("unknown source");
  const uint64_t identity_len = get(bytes, 44, 4);
  if (id_len > kUnwindCacheMaxBuildIdBytes) return refuse("build-id too long");
  if (identity_len > kUnwindCacheMaxIdentityBytes) return refuse("identity too long");
  if (nrows > limits.max_rows) {
    return refuse(std::to_string(nrows) + " rows, over the limit of " +
                  std::to_string(limits.max_rows));
  }
  // Every count is below 2^32, so this cannot overflow.
  const uint64_t expected_size =
      kHeaderBytes + id_len + identity_len + nrows * kRowBytes + npages * 4 + kChecksumBytes;
  if (bytes.size() != expected_size) {
    return refuse("size " + std::to_string(bytes.size()) + " does not match its counts (" +
                  std::to_string(expected_size) + ")");
  }
  const size_t body = bytes.size() - kChecksumBytes;
  if (get(bytes, body, 4) != checksum(bytes.substr(0, body))) return refuse("checksum mismatch");
  // Sound, but another object's: the caller counts a mismatch (decision
  // file-identity: a build-id alone does not make two files the same).
  if (bytes.substr(kHeaderBytes, id_len) != expected_build_id) {
    return Error{ESTALE, "unwind cache: built for another build-id"};
  }
  if (bytes.substr(kHeaderBytes + id_len, identity_len) != expected_identity) {
    return Error{ESTALE, "unwind cache: built for another file with this build-id (content differs)"};
  }

  UnwindTable table;
  table.stats.source = static_cast<CfiSource>(source);
  table.stats.cfi.fdes = get(bytes, 16, 8);
  table.stats.cfi.cies = get(bytes, 24, 8);
  table.rows.resize(static_cast<size_t>(nrows));
  size_t pos = kHeaderBytes + id_len + identity_len;
  for (lw_unwind_row& r : table.rows) {
    r.pc = static_cast<uint32_t>(get(bytes, pos, 4));
    r.cfa_offset = static_cast<int32_t>(static_cast<uint32_t>(get(bytes, pos + 4, 4)));
    r.rbp_offset = static_cast<int16_t>(static_cast<uint16_t>(get(bytes, pos + 8, 2)));
    r.cfa_type = static_cast<uint8_t>(get(bytes, pos + 10, 1));
    r.rbp_type = static_cast<uint8_t>(get(bytes, pos + 11, 1));
    pos += kRowBytes;
  }
  table.pages.resize(static_cast<size_t>(npages));
  for (uint32_t& p : table.pages) {
    p = static_cast<uint32_t>(get(bytes, pos, 4));
    pos += 4;
  }
  if (Status valid = validate_table(table); !valid.ok()) return refuse(valid.error().message);
  table.stats.rows_before_merge = table.rows.size();
  for (const lw_unwind_row& r : table.rows) ++table.stats.rows_by_cfa_type[r.cfa_type];
  return table;
}

}  // namespace lw
