// RAII for file descriptors and a bounded reader for small regular files
// (configs): one implementation for everything that opens files.
// Thread-safety: Fd is a move-only owner; read_regular_file is reentrant.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

#include "daemon/core/result.h"

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

}  // namespace lw
