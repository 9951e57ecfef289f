// SPDX-License-Identifier: Apache-2.0
// The one place that reads a traced process's /proc files and opens the
// files it maps (docs/architecture.md, "Layers": core/). Everything read
// here comes from a process that may be hostile or gone: every read is
// bounded, a vanished process is an error (ESRCH/ENOENT), never a crash.
// Thread-safety: reentrant functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/proc_maps.h"
#include "core/result.h"

namespace lw {

// /proc/PID/stat's starttime (clock ticks after boot), parsed by
// parse_proc_stat (core/process_identity.h); 0 when unreadable.
uint64_t process_start_ticks(pid_t pid);
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
