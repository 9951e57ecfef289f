/* SPDX-License-Identifier: Apache-2.0 */
// Parsing /proc/PID/maps. Pure (parse_proc_maps) plus a thin bounded reader.
// Thread-safety: free functions, no shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/platform/result.h"
#include "core/proc/map_path.h"

namespace lw {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;     // file offset of `start`
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  bool readable = false, writable = false, executable = false, is_private = false;
  // As the process sees it; "" for anonymous; "[heap]" etc. Shared by the
  // entries of one read that name the same file (MapsParser).
  MapPath path;
  bool deleted = false;    // path ended in " (deleted)" (suffix stripped from `path`)

  bool is_file() const { return inode != 0 && !path.empty() && path[0] == '/'; }
};

struct ParsedMaps {
  std::vector<MapEntry> entries;  // in file order (ascending addresses)
  size_t malformed_lines = 0;     // skipped, never fatal
  // Bounds of one read (decision process-cost), each counted: entries past
  // kMaxMapEntries are not kept; a path that would take the distinct paths
  // of the read past kMaxMapPathBytes is kept as kDroppedPath (the entry
  // is then no file: its frames show "[path dropped]+0x...").
  size_t entries_dropped = 0;
  size_t paths_dropped = 0;
  size_t path_bytes = 0;  // the distinct paths' heap bytes (MapsParser::memory_of)
  // What these parsed maps hold in the daemon's heap.
  size_t memory_bytes() const { return entries.capacity() * sizeof(MapEntry) + path_bytes; }
};

// At most this many entries a read: above the kernel's default
// vm.max_map_count (65,530).
inline constexpr size_t kMaxMapEntries = 1u << 16;
// At most this many bytes of distinct paths a read: a real process maps a
// few hundred objects under paths of a few dozen bytes.
inline constexpr size_t kMaxMapPathBytes = 4u << 20;
inline constexpr std::string_view kDroppedPath = "[path dropped]";

// Parses maps lines one at a time, each path stored once (interned) and
// the bounds above applied. Used by parse_proc_maps() and by readers of
// other files with maps-format headers (smaps).
class MapsParser {
 public:
  // One line without its newline: false when it is malformed (counted) or
  // breaks the ascending order of the lines fed before.
  bool feed(std::string_view line);
  // Parses one header line into *e (interned path) without keeping it;
  // false when malformed (not counted).
  bool parse_one(std::string_view line, MapEntry* e);
  void count_malformed() { ++out_.malformed_lines; }
  ParsedMaps take();
  // The heap bytes of one stored path of `n` bytes (string, control block).
  static size_t memory_of(size_t n) { return n + 1 + 64; }

 private:
  MapPath intern(std::string_view path);
  ParsedMaps out_;
  std::unordered_map<std::string_view, MapPath> paths_;  // keys view the stored strings
};

// Parses the text of /proc/PID/maps. Never throws; malformed or hostile lines
// (overlong paths, bad numbers, a range out of ascending order or
// overlapping the previous one) are skipped and counted.
ParsedMaps parse_proc_maps(std::string_view text);

// Reads the file at `path` (at most max_bytes) 64 KiB at a time and calls
// on_line with each line, without its newline: the text is never held
// whole. Lines longer than max_line_bytes, and a last line cut by
// max_bytes, are skipped; returns how many.
Result<size_t> read_lines(const std::string& path, size_t max_bytes, size_t max_line_bytes,
                          const std::function<void(std::string_view)>& on_line);

// Reads /proc/PID/maps (bounded: at most 64 MiB) and parses it as it
// reads (read_lines()).
Result<ParsedMaps> read_proc_maps(pid_t pid);

// The entry containing `addr`, or nullptr. `maps` must be sorted (as parsed).
const MapEntry* find_mapping(const ParsedMaps& maps, uint64_t addr);

}  // namespace lw
