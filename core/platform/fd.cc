// SPDX-License-Identifier: Apache-2.0
#include "core/platform/fd.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string_view>
#include <utility>

namespace lw {

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return errno_error("open");
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return errno_error("fstat");
  if (!S_ISREG(st.st_mode)) return Error{EINVAL, "not a regular file"};
  // Sized by the file (/proc files say 0) and grown while reading, never
  // max_bytes up front: that zero-filled 512 MiB for every unwind-table
  // cache file read, about 0.4 s each here.
  std::string text(std::min<size_t>(max_bytes + 1, std::max<size_t>(4096, static_cast<size_t>(st.st_size) + 1)),
                   '\0');
  size_t len = 0;
  for (;;) {
    if (len == text.size()) {
      if (text.size() > max_bytes) break;
      text.resize(std::min<size_t>(max_bytes + 1, text.size() * 2));
    }
    ssize_t n = read(fd.get(), text.data() + len, text.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error("read");
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  if (len > max_bytes)
    return Error{EFBIG, "file is larger than " + std::to_string(max_bytes) +
                            " bytes; refusing to parse it"};
  text.resize(len);
  return text;
}

namespace {

// `path_fd` (O_PATH: opening it had no effect on what it names) reopened
// for reading if it is a regular file, and closed. A FIFO, a device or a
// socket is never opened (an open of a device has side effects, and of a
// FIFO wakes its writer; issue 32, docs/testing.md). The reopen goes through
// the descriptor, so it is the inode fstat saw, whatever the path names
// meanwhile.
Result<int> reopen_if_regular(int path_fd) {
  Fd owned(path_fd);
  struct stat st;
  if (fstat(path_fd, &st) != 0) return errno_error("fstat");
  if (!S_ISREG(st.st_mode)) return Error{EINVAL, "not a regular file"};
  const std::string self = "/proc/self/fd/" + std::to_string(path_fd);
  int fd = open(self.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return errno_error("reopen");
  return fd;
}

}  // namespace

namespace {

// `path` opened for reading as a process whose root is `root_dir` sees it
// (RESOLVE_IN_ROOT, no magic links), with `extra` open flags.
Result<int> openat2_in_root(const std::string& root_dir, const std::string& path, uint64_t extra) {
  Fd root(open(root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return errno_error("open root " + root_dir);
  struct open_how how {};
  how.flags = (extra & O_PATH) ? (O_PATH | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | extra);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof(how));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0) {
    if (errno == ENOSYS) return Error{ENOSYS, "openat2 not supported (kernel < 5.6)"};
    return errno_error("open " + path + " in root " + root_dir);
  }
  return static_cast<int>(fd);
}

}  // namespace

Result<int> open_in_root(const std::string& root_dir, const std::string& path) {
  Result<int> fd = openat2_in_root(root_dir, path, O_PATH);
  if (!fd) return fd.error();
  return reopen_if_regular(*fd);
}

Result<int> open_dir_in_root(const std::string& root_dir, const std::string& path) {
  return openat2_in_root(root_dir, path, O_DIRECTORY);
}

Result<int> open_untrusted_file(const std::string& path) {
  // "/proc/" DIGITS "/root/" REST
  static constexpr std::string_view kProc = "/proc/", kRoot = "/root/";
  if (path.compare(0, kProc.size(), kProc) == 0) {
    size_t i = kProc.size();
    while (i < path.size() && isdigit(static_cast<unsigned char>(path[i]))) ++i;
    if (i > kProc.size() && path.compare(i, kRoot.size(), kRoot) == 0) {
      return open_in_root(path.substr(0, i + kRoot.size() - 1), path.substr(i + kRoot.size() - 1));
    }
  }
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + path);
  return reopen_if_regular(fd);
}

namespace {

constexpr size_t kOutputBufferBytes = 64 * 1024;

long openat2_retry(int dirfd, const char* path, const open_how& how) {
  long fd;
  do {
    fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  return fd;
}

// Whether the entry `name` in `dir` may be replaced by our file: absent, or
// a regular file of our own user.
Status check_replaceable(int dir, const std::string& name) {
  struct stat st;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return ok_status();
    return errno_error("stat");
  }
  if (S_ISLNK(st.st_mode)) return Error{ELOOP, "refusing to replace a symlink"};
  if (!S_ISREG(st.st_mode)) {
    return Error{EEXIST, "exists and is not a regular file; refusing to replace it"};
  }
  if (st.st_uid != geteuid()) {
    return Error{EPERM, "exists and belongs to uid " + std::to_string(st.st_uid) +
                            "; refusing to replace another user's file (remove it first)"};
  }
  return ok_status();
}

}  // namespace

OutputFile::OutputFile(OutputFile&& o) noexcept { *this = std::move(o); }

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this == &o) return *this;
  if (!temp_name_.empty() && dir_.valid()) unlinkat(dir_.get(), temp_name_.c_str(), 0);
  dir_ = std::move(o.dir_);
  fd_ = std::move(o.fd_);
  path_ = std::move(o.path_);
  name_ = std::move(o.name_);
  temp_name_ = std::exchange(o.temp_name_, std::string());
  buffer_ = std::move(o.buffer_);
  status_ = std::move(o.status_);
  committed_ = o.committed_;
  return *this;
}

OutputFile::~OutputFile() {
  // Never committed (or the commit failed): no partial file left behind.
  if (!temp_name_.empty() && dir_.valid()) unlinkat(dir_.get(), temp_name_.c_str(), 0);
}

Status OutputFile::flush() {
  size_t done = 0;
  while (status_.ok() && done < buffer_.size()) {
    ssize_t n = ::write(fd_.get(), buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // write(2) returning 0 for a regular file means no space was written.
      status_ = n < 0 ? errno_error("write") : Error{EIO, "write: wrote nothing"};
      break;
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return status_;
}

Status OutputFile::write(const void* data, size_t len) {
  if (!status_.ok()) return status_;
  if (!fd_.valid()) return status_ = Error{EBADF, "write: file not open"};
  buffer_.append(static_cast<const char*>(data), len);
  if (buffer_.size() >= kOutputBufferBytes) return flush();
  return status_;
}

Status OutputFile::publish() {
  if (Status st = check_replaceable(dir_.get(), name_); !st) return st;
  if (renameat(dir_.get(), temp_name_.c_str(), dir_.get(), name_.c_str()) != 0) {
    return errno_error("rename into place");
  }
  temp_name_.clear();
  return ok_status();
}

Status OutputFile::commit() {
  if (committed_) return status_;
  if (Status st = flush(); !st) return st;
  if (fsync(fd_.get()) != 0) return status_ = errno_error("fsync");
  if (!temp_name_.empty()) {
    if (Status st = publish(); !st) return status_ = st;
  }
  committed_ = true;
  return status_;
}

Result<OutputFile> create_output_file(const std::string& path, OutputFile::Publish publish) {
  if (path.empty()) return Error{EINVAL, "empty path"};
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return Error{EISDIR, "names a directory, not a file"};
  }
  OutputFile out;
  out.path_ = path;
  out.name_ = name;
  // Every component of the directory, not only the last one, must be a
  // real directory: a symlinked parent created by another user would
  // otherwise send root's write anywhere.
  struct open_how dir_how {};
  dir_how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  dir_how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long dfd = openat2_retry(AT_FDCWD, dir.c_str(), dir_how);
  if (dfd < 0) {
    if (errno == ENOSYS) return Error{ENOSYS, "openat2 not supported (kernel < 5.6)"};
    if (errno == ELOOP) {
      return Error{ELOOP, "refusing to write through a symlink: a component of " + dir +
                              " is a symlink (give the path without symlinks)"};
    }
    return errno_error("open directory " + dir);
  }
  out.dir_.reset(static_cast<int>(dfd));
  if (Status st = check_replaceable(out.dir_.get(), name); !st) {
    if (st.error().code == ELOOP) return Error{ELOOP, "refusing to write through a symlink"};
    return st.error();
  }
  // A fresh inode, ours, 0600, in the same directory (so the rename is
  // atomic and stays on one file system).
  struct open_how how {};
  how.flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY;
  how.mode = 0600;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  unsigned seed = static_cast<unsigned>(getpid()) ^ static_cast<unsigned>(time(nullptr)) ^
                  static_cast<unsigned>(reinterpret_cast<uintptr_t>(&out));
  for (int attempt = 0; attempt < 100 && !out.fd_.valid(); ++attempt) {
    char suffix[16];
    snprintf(suffix, sizeof(suffix), "%08x", rand_r(&seed));
    std::string temp = "." + name.substr(0, 200) + ".tmp-" + suffix;
    long fd = openat2_retry(out.dir_.get(), temp.c_str(), how);
    if (fd >= 0) {
      out.fd_.reset(static_cast<int>(fd));
      out.temp_name_ = temp;
    } else if (errno != EEXIST) {
      return errno_error("create a temporary file in " + dir);
    }
  }
  if (!out.fd_.valid()) return Error{EEXIST, "cannot find a free temporary name in " + dir};
  if (publish == OutputFile::Publish::kNow) {
    if (Status st = out.publish(); !st) return st.error();
  }
  return out;
}

}  // namespace lw
