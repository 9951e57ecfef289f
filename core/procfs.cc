// SPDX-License-Identifier: Apache-2.0
#include "core/procfs.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include "core/capabilities.h"
#include "core/fd.h"
#include "core/process_identity.h"

namespace lw {

namespace {

// At most `max` bytes of a small /proc file; "" when it cannot be read.
std::string read_small(const std::string& path, size_t max) {
  Result<std::string> text = read_regular_file(path, max);
  return text ? std::move(*text) : std::string();
}

}  // namespace

uint64_t process_start_ticks(pid_t pid) {
  Result<StatFields> st = parse_proc_stat(read_small("/proc/" + std::to_string(pid) + "/stat", 4096));
  return st ? st->start_time : 0;
}

std::string process_comm(pid_t pid) {
  std::string comm = read_small("/proc/" + std::to_string(pid) + "/comm", 64);
  while (!comm.empty() && (comm.back() == '\n' || comm.back() == '\0')) comm.pop_back();
  return comm;
}

Result<int> open_mapped_file(pid_t pid, const MapEntry& m) {
  char buf[128];
  snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m.start, m.end);
  const std::string candidates[] = {buf, "/proc/" + std::to_string(pid) + "/root" + m.path};
  int errors[2] = {0, 0};
  Error last{ENOENT, "no path"};
  for (int i = 0; i < 2; ++i) {
    const std::string& p = candidates[i];
    // Regular files only, never blocking on a FIFO; the /proc/PID/root
    // fallback resolves every link inside the target's root (fd.h).
    Result<int> opened = open_untrusted_file(p);
    if (!opened) {
      errors[i] = opened.error().code;
      last = Error{opened.error().code, p + ": " + opened.error().message};
      continue;
    }
    int fd = *opened;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_ino == m.inode && S_ISREG(st.st_mode)) return fd;
    close(fd);
    errors[i] = ESTALE;
    last = Error{ESTALE, p + ": file changed since it was mapped"};
  }
  // Name the capability that would have opened it (README, "Capabilities").
  // map_files needs CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN); without it
  // only the path is left, which fails for a deleted or replaced file.
  if (errors[0] == EPERM && !has_capability(CAP_CHECKPOINT_RESTORE) && !has_capability(CAP_SYS_ADMIN) &&
      (errors[1] == ENOENT || errors[1] == ESTALE))
    return Error{EPERM, "permission denied opening " + candidates[0] +
                            ": missing CAP_CHECKPOINT_RESTORE (needed to open " + m.path +
                            " through /proc/PID/map_files: it was deleted or replaced on disk since pid " +
                            std::to_string(pid) + " mapped it)"};
  if (errors[1] == EACCES || errors[1] == EPERM) {
    if (std::string missing = missing_capabilities({CAP_SYS_PTRACE}); !missing.empty())
      return Error{EPERM, "permission denied opening " + candidates[1] + ": missing " + missing +
                              " (needed to read another user's /proc/PID/root)"};
    if (std::string missing = missing_capabilities({CAP_DAC_READ_SEARCH}); !missing.empty())
      return Error{EPERM, "permission denied opening " + candidates[1] + ": missing " + missing +
                              " (the file or a directory above it is not readable by leakwatch's user)"};
  }
  return last;
}

}  // namespace lw
