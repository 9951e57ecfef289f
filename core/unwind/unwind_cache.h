// SPDX-License-Identifier: Apache-2.0
// On-disk form of an UnwindTable, for a cache keyed by build-id and the
// content hash of what the table was compiled from (cfi_identity(),
// decision file-identity): building
// libtorch_cpu's table takes longer than reading it back (bench/README.md,
// "Unwind tables").
//
// Layout (little-endian), format version kUnwindCacheVersion (2; version 1
// had no identity and is refused, so such a file is built again):
//   0   "LWUNWIND"             8 bytes
//   8   u32 version
//   12  u32 source             CfiSource
//   16  u64 fdes, u64 cies     from the build's stats
//   32  u32 nrows, u32 npages, u32 build_id_len, u32 identity_len
//   48  build-id               build_id_len bytes (the hex string)
//       identity               identity_len bytes (cfi_identity(), hex)
//       rows                   nrows x 12 bytes, lw_unwind_row field order
//       pages                  npages x u32
//       u32 CRC-32 (zlib) of every byte before it
//
// The cache file is ours, but a file on disk can be damaged or replaced:
// parse_cached_table checks the sizes before reading, the checksum, the
// build-id and the identity (a file written for another object that claims
// the same build-id is refused: ESTALE), and then the table itself (validate_table: sorted rows, page
// index consistent with them), so a table it returns is safe to load.
// Thread-safety: both functions are reentrant.
#pragma once

#include <string>
#include <string_view>

#include "core/platform/result.h"
#include "core/unwind/unwind_table.h"

namespace lw {

inline constexpr uint32_t kUnwindCacheVersion = 2;
inline constexpr size_t kUnwindCacheMaxBuildIdBytes = 256;
inline constexpr size_t kUnwindCacheMaxIdentityBytes = 128;

// "" when the table cannot be cached: a build-id over
// kUnwindCacheMaxBuildIdBytes (real ones are 40 hex digits), an identity
// over kUnwindCacheMaxIdentityBytes (cfi_identity() is 64).
std::string serialize(const UnwindTable& table, std::string build_id, std::string_view identity);

// Refuses anything but a table written by serialize() for
// `expected_build_id` and `expected_identity` in this format version, with
// at most limits.max_rows rows: ESTALE when the file is sound but was
// written for another object (build-id or identity differ: the caller
// counts a mismatch), EINVAL for anything else.
Result<UnwindTable> parse_cached_table(std::string_view bytes, std::string_view expected_build_id,
                                       std::string_view expected_identity,
                                       const UnwindBuildLimits& limits = {});

}  // namespace lw
