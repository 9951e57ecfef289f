// SPDX-License-Identifier: Apache-2.0
// The one place that reads a traced process's /proc files and opens the
// files it maps (docs/architecture.md, "Layers": core/). Everything read
// here comes from a process that may be hostile or gone: every read is
// bounded, a vanished process is an error (ESRCH/ENOENT), never a crash.
// Thread-safety: reentrant functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/proc/proc_maps.h"
#include "core/platform/result.h"

namespace lw {

// The value of the first `name`=... in /proc/PID/environ bytes
// (NUL-separated, untrusted, possibly cut short): getenv's answer. nullopt
// when the variable is not set.
std::optional<std::string_view> environ_value(std::string_view environ, std::string_view name);

// /proc/PID/statm, in pages: "size resident shared text lib data dt".
struct StatmPages {
  uint64_t size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  size_t fields = 0;  // how many were present
};
// The one statm parser: at least `min_fields` leading numbers (at most 7
// read), separated by spaces; nullopt for malformed text or an overflow.
std::optional<StatmPages> parse_statm_pages(std::string_view text, size_t min_fields);
// Reads /proc/PID/statm ("self" for pid 0): one bounded read.
std::optional<StatmPages> read_statm_pages(pid_t pid);
// The daemon's own resident memory in bytes (/proc/self/statm), 0 if unreadable.
uint64_t own_rss_bytes();

// The daemon's own process figures for its self-monitoring metrics, from
// /proc/self/stat, /proc/stat's btime, /proc/self/fd and /proc/self/limits.
struct SelfStats {
  double cpu_seconds = 0, start_time = 0, rss = 0, vsize = 0, open_fds = 0, max_fds = 0;
  int threads = 0;
  double boot_time = 0;         // unix seconds (/proc/stat's btime); 0 when unreadable
  double ticks_per_second = 0;  // sysconf(_SC_CLK_TCK): /proc's clock ticks
};
SelfStats read_self_stats();

// /proc/PID/stat's starttime (clock ticks after boot), parsed by
// parse_proc_stat (core/proc/process_identity.h); 0 when unreadable.
uint64_t process_start_ticks(pid_t pid);
// /proc/PID/stat's num_threads; 0 when unreadable.
uint64_t process_threads(pid_t pid);
// /proc/PID/comm without its newline; "" when unreadable.
std::string process_comm(pid_t pid);

// Opens the mapped file as the target sees it. /proc/PID/map_files/ names
// the exact mapping (it works for deleted or replaced files and for other
// mount namespaces); /proc/PID/root/PATH is the fallback where map_files is
// not readable. The inode is checked, so a file swapped under the same path
// is never opened by mistake. Errors name the missing capability where one
// would have opened it. Returns an owned fd (read-only, regular file).
Result<int> open_mapped_file(pid_t pid, const MapEntry& m);

}  // namespace lw
