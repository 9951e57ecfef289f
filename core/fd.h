/* SPDX-License-Identifier: Apache-2.0 */
// RAII for file descriptors and a bounded reader for small regular files
// (configs): one implementation for everything that opens files.
// Thread-safety: Fd is a move-only owner; read_regular_file is reentrant.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

#include "core/result.h"

namespace lw {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Reads a regular file of at most `max_bytes`. Refuses FIFOs, devices and
// directories (opened O_NONBLOCK, so a FIFO in its place cannot hang the
// caller) and larger files (EFBIG); reads one byte past the limit rather
// than trusting st_size, since the file may grow meanwhile. Error messages
// name the failing step, not the path (callers prefix it).
Result<std::string> read_regular_file(const std::string& path, size_t max_bytes);

// Opens `path` (absolute or relative) as a process whose root is `root_dir`
// would see it, for reading. Every symlink, absolute ones included, and every
// ".." resolves inside that root (openat2 with RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS), so a container cannot point the daemon at a host
// file; the file is opened O_NONBLOCK, so a FIFO in its place cannot hang the
// caller, and refused unless it is a regular file. Kernels without openat2
// (< 5.6) get ENOSYS: there is no safe fallback. Returns an owned fd.
Result<int> open_in_root(const std::string& root_dir, const std::string& path);

// Opens a file that a target process controls, for reading, regular files
// only, O_NONBLOCK. "/proc/PID/root/REST" goes through open_in_root
// ("/proc/PID/root", REST); any other path (/proc/PID/map_files/... magic
// links name the exact mapped inode) is opened as is. Returns an owned fd.
Result<int> open_untrusted_file(const std::string& path);

// Creates (or truncates) an output file the user named (snapshot -o, top
// --record-events): mode 0600 when created, never through a symlink as the
// last component (O_NOFOLLOW: a planted link in /tmp cannot redirect a
// root-run leakwatch), regular files only (O_NONBLOCK while opening: a FIFO
// without a reader fails instead of hanging). Returns an owned, blocking fd.
Result<int> create_output_file(const std::string& path);

}  // namespace lw
