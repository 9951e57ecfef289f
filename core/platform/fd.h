/* SPDX-License-Identifier: Apache-2.0 */
// RAII for file descriptors and a bounded reader for small regular files
// (configs): one implementation for everything that opens files.
// Thread-safety: Fd is a move-only owner; read_regular_file is reentrant.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

#include "core/platform/result.h"

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
// file; the path is opened O_PATH and only a regular file is reopened for
// reading (through the descriptor), so a FIFO, a device or a socket in its
// place is never opened: no hang, no side effect. Kernels without openat2
// (< 5.6) get ENOSYS: there is no safe fallback. Returns an owned fd.
Result<int> open_in_root(const std::string& root_dir, const std::string& path);
// The same for a directory (a listing, e.g. with fdopendir).
Result<int> open_dir_in_root(const std::string& root_dir, const std::string& path);

// Opens a file that a target process controls, for reading, regular files
// only (O_PATH, fstat, then reopened: nothing else is ever opened).
// "/proc/PID/root/REST" goes through open_in_root
// ("/proc/PID/root", REST); any other path (/proc/PID/map_files/... magic
// links name the exact mapped inode) is opened as is. Returns an owned fd.
Result<int> open_untrusted_file(const std::string& path);

// A file the user asked leakwatch to write (snapshot -o, top
// --record-events), which root may write into a directory other users
// control (/tmp). Made safe by construction:
//   - the directory is resolved with openat2(RESOLVE_NO_SYMLINKS): no
//     component of the path may be a symlink (a link planted as a parent
//     directory cannot redirect root's write), and /proc/self/... is
//     refused (/proc/self is a symlink);
//   - the data goes to a fresh temporary file in that directory, created
//     O_EXCL with mode 0600 (never an existing inode: a file another user
//     pre-created and can still read is not reused), renamed over the
//     name by commit();
//   - an existing entry of that name that is not a regular file (a FIFO,
//     a device, a directory, a symlink), or that belongs to another user,
//     is refused, not replaced;
//   - every write is checked; a failed one is sticky and returned by
//     write() and commit(), which the CLI turns into an error exit.
// Without commit() the temporary file is removed on destruction, so a
// failed snapshot leaves neither a partial file nor the old one damaged.
// Thread-safety: one owner; not for concurrent use.
class OutputFile {
 public:
  // When the file appears under its name: at commit() (atomically, for a
  // snapshot), or right away (a stream such as recorded events, written
  // while `top` runs: commit() then only flushes and syncs).
  enum class Publish { kOnCommit, kNow };

  OutputFile() = default;
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // Buffers `len` bytes (64 KiB at a time go to the file). The first
  // failure sticks: later calls return it without writing.
  Status write(const void* data, size_t len);
  // Flushes, fsyncs and (kOnCommit) renames the file into place.
  Status commit();
  // The first write error, if any.
  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  friend Result<OutputFile> create_output_file(const std::string& path, OutputFile::Publish);
  Status flush();
  Status publish();

  Fd dir_;
  Fd fd_;
  std::string path_;       // as the user gave it, for messages
  std::string name_;       // the last component
  std::string temp_name_;  // "" once renamed into place
  std::string buffer_;
  Status status_ = ok_status();
  bool committed_ = false;
};

// Creates the output file `path` (see OutputFile). Errors name the reason:
// ELOOP for a symlink anywhere in the path, EEXIST for an existing entry
// that is not a regular file, EPERM for another user's file.
Result<OutputFile> create_output_file(const std::string& path,
                                      OutputFile::Publish publish = OutputFile::Publish::kOnCommit);

}  // namespace lw
