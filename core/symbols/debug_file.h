// SPDX-License-Identifier: Apache-2.0
// Finds the separate debug information of an object (docs/architecture.md,
// "Symbolization"): by build-id under each debug directory
// (DIR/.build-id/xx/yyyy.debug), through .gnu_debuglink (next to the
// object, in its .debug/ and under each debug directory; CRC-32 checked),
// in the target's root (/proc/PID/root) first and then in the daemon's,
// in the debuginfod cache, and the object's own .gnu_debugdata
// (MiniDebugInfo: an xz-compressed ELF file with a .symtab).
//
// Every file is hostile input: a target controls its root and its objects.
// Files are opened as regular files only, inside the target's root (no
// symlink escapes, fd.h), refused over a size bound, checked as ELF by
// ElfFile's layout rules, and used only if their build-id is the object's
// (and, for a debug link, their CRC-32 is the link's). MiniDebugInfo is
// decompressed with liblzma under a memory and an output bound (libdwfl's
// own decoder grows its buffer without one: an xz bomb would take the
// daemon's memory).
//
// Thread-safety: free functions without shared state; reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/platform/fd.h"
#include "core/platform/result.h"

namespace lw {

// Where a module's symbols came from, best last. Also a metric label.
enum class DebugSource : uint8_t {
  kNone,        // only what the object itself has (.dynsym), or nothing
  kSelf,        // the object has its own .symtab and DWARF
  kDebugData,   // .gnu_debugdata (MiniDebugInfo): names, no lines
  kDebugLink,   // .gnu_debuglink
  kBuildIdDir,  // DIR/.build-id/xx/yyyy.debug
  kDebuginfod,  // fetched from a debuginfod server (cache_dir)
};
const char* debug_source_name(DebugSource source);  // "none", "build_id_dir", ...

struct DebugSearchOptions {
  std::vector<std::string> debug_dirs = {"/usr/lib/debug"};  // absolute
  // The debuginfod cache (CACHE/BUILD_ID/debuginfo), searched in the
  // daemon's root only; "" for none.
  std::string debuginfod_cache_dir;
  uint64_t max_file_bytes = 2ull << 30;      // debug files larger are refused
  uint64_t max_debugdata_bytes = 64u << 20;  // MiniDebugInfo, compressed and decompressed
};

// A candidate path, as the target (or the daemon) would name it.
struct DebugCandidate {
  std::string path;
  DebugSource source = DebugSource::kNone;
};

// Where the debug file of `object_path` may be, in the order tried: by
// build-id under each debug dir, then the debug link next to the object,
// in its .debug/, and under each debug dir at the object's directory.
// Pure. A link name with a '/' or that is "." or ".." gives no candidate
// (it would leave the directories searched).
std::vector<DebugCandidate> debug_file_candidates(const std::string& object_path,
                                                  const std::string& build_id,
                                                  const std::string& debuglink,
                                                  const std::vector<std::string>& debug_dirs);

struct DebugFileQuery {
  std::string object_path;  // as in the target's /proc/PID/maps
  std::string build_id;     // the object's, lowercase hex; "" when it has none
  std::string debuglink;    // .gnu_debuglink name, "" when none
  uint32_t debuglink_crc = 0;
  // The target's root ("/proc/PID/root"), searched first; "" for none.
  std::string target_root;
};

struct DebugFile {
  Fd fd;             // regular file (or memfd for MiniDebugInfo), at offset 0
  std::string path;  // where it was found, for logs ("memfd:..." for MiniDebugInfo)
  DebugSource source = DebugSource::kNone;
  std::shared_ptr<const ElfFile> elf;  // opened without a symbol index
};

// Why candidates were refused, for counters.
struct DebugLookupStats {
  uint64_t rejected_build_id = 0;  // a file whose build-id is not the object's
  uint64_t rejected_crc = 0;       // a debug-link file whose CRC-32 is not the link's
  uint64_t rejected_file = 0;      // too large, not ELF, not a regular file
  uint64_t rejected_debugdata = 0; // MiniDebugInfo over its bound or corrupt
};

// The first candidate (debug_file_candidates, in the target's root then the
// daemon's; then the debuginfod cache) that is the object's debug file.
// Needs a build-id or a debug link to find anything.
std::optional<DebugFile> find_debug_file(const DebugFileQuery& query,
                                         const DebugSearchOptions& options,
                                         DebugLookupStats* stats);

// The file a .gnu_debugaltlink (dwz) names: by its build-id under each
// debug dir, then at the link's own path (absolute, or relative to the
// debug file's directory); in the target's root, then the daemon's.
std::optional<DebugFile> find_alt_file(const std::string& link_path, const std::string& link_build_id,
                                       const std::string& debug_file_path,
                                       const std::string& target_root,
                                       const DebugSearchOptions& options, DebugLookupStats* stats);

// The object's .gnu_debugdata, decompressed into a memfd and checked as an
// ELF file with a .symtab. nullopt when it has none or it is refused
// (counted in stats->rejected_debugdata).
std::optional<DebugFile> extract_debugdata(const ElfFile& object, const DebugSearchOptions& options,
                                           DebugLookupStats* stats);

// xz data decompressed, at most `max_out` bytes (EFBIG past it, EINVAL when
// corrupt). liblzma's decoder memory is bounded too (64 MiB).
Result<std::string> xz_decompress(std::span<const uint8_t> in, size_t max_out);

// CRC-32 (IEEE, zlib's) of a whole open file, read with pread; nullopt on a
// read error or past `max_bytes`.
std::optional<uint32_t> file_crc32(int fd, uint64_t max_bytes);

}  // namespace lw
