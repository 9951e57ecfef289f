/* SPDX-License-Identifier: Apache-2.0 */
// Parsing /proc/PID/maps. Pure (parse_proc_maps) plus a thin bounded reader.
// Thread-safety: free functions, no shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/platform/result.h"

namespace lw {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;     // file offset of `start`
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  bool readable = false, writable = false, executable = false, is_private = false;
  std::string path;        // as the process sees it; "" for anonymous; "[heap]" etc.
  bool deleted = false;    // path ended in " (deleted)" (suffix stripped from `path`)

  bool is_file() const { return inode != 0 && !path.empty() && path[0] == '/'; }
};

struct ParsedMaps {
  std::vector<MapEntry> entries;  // in file order (ascending addresses)
  size_t malformed_lines = 0;     // skipped, never fatal
};

// Parses the text of /proc/PID/maps. Never throws; malformed or hostile lines
// (overlong paths, bad numbers, a range out of ascending order or
// overlapping the previous one) are skipped and counted.
ParsedMaps parse_proc_maps(std::string_view text);

// Reads /proc/PID/maps (bounded: at most 64 MiB) and parses it.
Result<ParsedMaps> read_proc_maps(pid_t pid);

// The entry containing `addr`, or nullptr. `maps` must be sorted (as parsed).
const MapEntry* find_mapping(const ParsedMaps& maps, uint64_t addr);

}  // namespace lw
