// SPDX-License-Identifier: Apache-2.0
// On-disk form of an UnwindTable, for a cache keyed by build-id: building
// libtorch_cpu's table takes longer than reading it back (bench/README.md,
// "Unwind tables").
//
// Layout (little-endian), format version kUnwindCacheVersion:
//   0   "LWUNWIND"             8 bytes
//   8   u32 version
//   12  u32 source             CfiSource
//   16  u64 fdes, u64 cies     from the build's stats
//   32  u32 nrows, u32 npages, u32 build_id_len, u32 reserved (0)
//   48  build-id               build_id_len bytes (the hex string)
//       rows                   nrows x 12 bytes, lw_unwind_row field order
//       pages                  npages x u32
//       u32 CRC-32 (zlib) of every byte before it
//
// The cache file is ours, but a file on disk can be damaged or replaced:
// parse_cached_table checks the sizes before reading, the checksum, the
// build-id, and then the table itself (validate_table: sorted rows, page
// index consistent with them), so a table it returns is safe to load.
// Thread-safety: both functions are reentrant.
#pragma once

#include <string>
#include <string_view>

#include "core/platform/result.h"
#include "core/unwind/unwind_table.h"

namespace lw {

inline constexpr uint32_t kUnwindCacheVersion = 1;
inline constexpr size_t kUnwindCacheMaxBuildIdBytes = 256;

// "" when the table cannot be cached: a build-id over
// kUnwindCacheMaxBuildIdBytes (real ones are 40 hex digits).
std::string serialize(const UnwindTable& table, std::string build_id);

// Refuses (EINVAL) anything but a table written by serialize() for
// `expected_build_id` in this format version, with at most
// limits.max_rows rows.
Result<UnwindTable> parse_cached_table(std::string_view bytes, std::string_view expected_build_id,
                                       const UnwindBuildLimits& limits = {});

}  // namespace lw
