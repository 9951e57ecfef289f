// SPDX-License-Identifier: Apache-2.0
#include "core/proc/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/platform/capabilities.h"
#include "core/platform/fd.h"
#include "core/proc/process_identity.h"

namespace lw {

std::optional<std::string_view> environ_value(std::string_view environ, std::string_view name) {
  for (size_t pos = 0; pos < environ.size();) {
    size_t end = environ.find('\0', pos);
    if (end == std::string_view::npos) end = environ.size();
    const std::string_view var = environ.substr(pos, end - pos);
    if (var.size() > name.size() && var.substr(0, name.size()) == name && var[name.size()] == '=')
      return var.substr(name.size() + 1);
    pos = end + 1;
  }
  return std::nullopt;
}

namespace {

// At most `max` bytes of a small /proc file; "" when it cannot be read.
std::string read_small(const std::string& path, size_t max) {
  Result<std::string> text = read_regular_file(path, max);
  return text ? std::move(*text) : std::string();
}

}  // namespace

std::optional<StatmPages> parse_statm_pages(std::string_view text, size_t min_fields) {
  uint64_t f[7] = {};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  size_t n = 0;
  for (; n < 7; ++n) {
    while (p < end && *p == ' ') ++p;
    if (p == end || *p == '\n') break;
    auto [next, ec] = std::from_chars(p, end, f[n]);
    if (ec != std::errc() || next == p) return std::nullopt;
    p = next;
    if (p < end && *p != ' ' && *p != '\n') return std::nullopt;
  }
  if (n < min_fields) return std::nullopt;
  StatmPages s;
  s.size = f[0];
  s.resident = f[1];
  s.shared = f[2];
  s.text = f[3];
  s.lib = f[4];
  s.data = f[5];
  s.fields = n;
  return s;
}

std::optional<StatmPages> read_statm_pages(pid_t pid) {
  const std::string path = pid ? "/proc/" + std::to_string(pid) + "/statm" : "/proc/self/statm";
  std::string text = read_small(path, 256);
  if (text.empty()) return std::nullopt;
  return parse_statm_pages(text, 6);
}

uint64_t own_rss_bytes() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::optional<StatmPages> s = read_statm_pages(0);
  return s ? s->resident * page : 0;
}

namespace {

// The boot time (btime of /proc/stat), unix seconds: read once, it does
// not change.
double boot_time() {
  static const double btime = [] {
    std::string stat = read_small("/proc/stat", 1 << 20);
    size_t at = stat.find("\nbtime ");
    return at == std::string::npos ? 0.0 : std::strtod(stat.c_str() + at + 7, nullptr);
  }();
  return btime;
}

// The daemon's open fds. Since Linux 6.2 the size of /proc/self/fd is that
// count: one stat, where listing the directory costs about 10 ms a publish
// at a thousand traced processes (~40 probe fds each; lw_bench_publish).
// Older kernels report 0 there: list it.
double open_fd_count() {
  struct stat st;
  if (stat("/proc/self/fd", &st) == 0 && st.st_size > 0) return static_cast<double>(st.st_size);
  double n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (struct dirent* e = readdir(d))
      if (e->d_name[0] != '.') n += 1;
    closedir(d);
    n -= 1;  // the directory fd itself
  }
  return n;
}

}  // namespace

SelfStats read_self_stats() {
  SelfStats s;
  s.ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.boot_time = boot_time();
  if (Result<StatFields> st = parse_proc_stat(read_small("/proc/self/stat", 4096))) {
    const double tick = s.ticks_per_second;
    s.cpu_seconds = static_cast<double>(st->utime + st->stime) / tick;
    s.threads = static_cast<int>(st->num_threads);
    s.start_time = s.boot_time + static_cast<double>(st->start_time) / tick;
    s.vsize = static_cast<double>(st->vsize);
    s.rss = static_cast<double>(st->rss_pages) * static_cast<double>(sysconf(_SC_PAGESIZE));
  }
  s.open_fds = open_fd_count();
  std::string limits = read_small("/proc/self/limits", 8192);
  if (size_t at = limits.find("Max open files"); at != std::string::npos)
    s.max_fds = std::strtod(limits.c_str() + at + strlen("Max open files"), nullptr);
  return s;
}

uint64_t process_start_ticks(pid_t pid) {
  Result<StatFields> st = parse_proc_stat(read_small("/proc/" + std::to_string(pid) + "/stat", 4096));
  return st ? st->start_time : 0;
}

uint64_t process_threads(pid_t pid) {
  Result<StatFields> st = parse_proc_stat(read_small("/proc/" + std::to_string(pid) + "/stat", 4096));
  return st ? st->num_threads : 0;
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
