/* SPDX-License-Identifier: Apache-2.0 */
// JIT frames' names from a runtime's perf map (docs/runtimes.md, decision
// jit-perf-maps): `/tmp/perf-PID.map`, one line per code object,
// "START SIZE name" (START and SIZE hex, "0x" optional, the name the rest
// of the line), appended as the runtime compiles (Node's
// --perf-basic-prof, .NET's DOTNET_PerfMapEnabled=1) or written whole on
// request (JDK 17's `jcmd PID Compiler.perfmap`).
//
// The file is written by the traced process: untrusted input. PerfMap is
// the pure parser and index; it bounds what it keeps (PerfMapLimits) and
// counts what it skipped (PerfMapStats). A later line for an address range
// wins over every earlier one overlapping it: the runtime moved or
// recompiled the code there, and the older object is gone.
//
// PerfMapFile reads one process's map through the process's own root
// (/proc/PID/root, so a container's /tmp), under its pid in its own pid
// namespace (the last NSpid of /proc/PID/status), incrementally from the
// last offset, and starts over when the file was replaced, truncated or
// rewritten in place (its first or last bytes read changed).
// Thread-safety: neither class is thread-safe; one owner (the tracer's
// thread).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace lw {

struct PerfMapLimits {
  // Bytes read from one process's map in all (appends included); the rest
  // of the file is not read (PerfMapStats::file_capped).
  uint64_t max_file_bytes = 64ull << 20;
  // What the kept entries may take, each charged its name plus
  // kPerfMapEntryOverhead; an entry over it is refused and counted.
  uint64_t max_memory_bytes = 16ull << 20;
  size_t max_line_bytes = 4096;  // a longer line is skipped whole
  size_t max_name_bytes = 512;   // a longer name is cut to this
};

// What one entry costs besides its name (the index node, the range).
inline constexpr uint64_t kPerfMapEntryOverhead = 96;

struct PerfMapStats {
  uint64_t bytes_read = 0;        // fed to the parser
  uint64_t lines = 0;             // complete lines seen
  uint64_t entries_added = 0;     // lines kept as entries
  uint64_t entries_replaced = 0;  // earlier entries dropped by a later overlapping one
  uint64_t bad_lines = 0;         // not "START SIZE name", a zero size, or a range that wraps
  uint64_t long_lines = 0;        // over max_line_bytes, skipped
  uint64_t names_cut = 0;         // names over max_name_bytes, cut
  uint64_t entries_refused = 0;   // over max_memory_bytes
  bool file_capped = false;       // max_file_bytes reached: the rest is not read
  uint64_t restarts = 0;          // the file was replaced or truncated: read again from 0
};

class PerfMap {
 public:
  explicit PerfMap(PerfMapLimits limits = {}) : limits_(limits) {}

  // The next bytes of the file, in order. A line split between calls is
  // completed by the next one (kept up to max_line_bytes).
  void feed(std::string_view bytes);
  // Forgets every entry and the partial line (the file starts over); the
  // counters stay.
  void clear();

  struct Symbol {
    uint64_t start = 0;
    uint64_t size = 0;
    std::string_view name;  // valid until the next feed() or clear()
  };
  // The entry whose [start, start + size) holds `addr`.
  std::optional<Symbol> lookup(uint64_t addr) const;

  size_t entries() const { return by_start_.size(); }
  uint64_t memory_bytes() const { return memory_bytes_; }
  // Bumped whenever an entry is added or the map cleared.
  uint64_t generation() const { return generation_; }
  const PerfMapStats& stats() const { return stats_; }
  PerfMapStats& mutable_stats() { return stats_; }
  const PerfMapLimits& limits() const { return limits_; }

 private:
  struct Entry {
    uint64_t end = 0;
    std::string name;
  };
  void add_line(std::string_view line);
  void insert(uint64_t start, uint64_t end, std::string_view name);

  PerfMapLimits limits_;
  PerfMapStats stats_;
  std::map<uint64_t, Entry> by_start_;  // disjoint ranges
  uint64_t memory_bytes_ = 0;
  uint64_t generation_ = 0;
  std::string partial_;        // the last line's bytes so far
  bool skipping_line_ = false;  // inside a line over max_line_bytes
};

// Parses "NSpid:\t4242\t7" out of /proc/PID/status text: the last number
// (the pid in the process's own namespace); 0 when there is none.
pid_t last_nspid(std::string_view status);

class PerfMapFile {
 public:
  PerfMapFile(pid_t pid, PerfMapLimits limits = {});

  // Reads what was appended since the last call. Returns whether entries
  // changed. A missing file is not an error (the runtime writes no map).
  bool refresh();

  const PerfMap& map() const { return map_; }
  // The map's path as the target sees it ("/tmp/perf-NSPID.map"); "" until
  // the pid in its namespace is known.
  const std::string& path() const { return path_; }

 private:
  // Whether the bytes at the head and before offset_ are still those read.
  bool edges_unchanged(int fd) const;

  pid_t pid_;
  std::string path_;
  uint64_t offset_ = 0;  // bytes of the current file consumed
  uint64_t ino_ = 0;     // the file those bytes came from
  uint64_t dev_ = 0;
  // The first and the last kEdgeBytes consumed: a file rewritten in place
  // (jcmd Compiler.perfmap truncates and writes it anew) is told from one
  // appended to when they changed.
  static constexpr size_t kEdgeBytes = 256;
  std::string head_;
  std::string tail_;
  PerfMap map_;
};

}  // namespace lw
