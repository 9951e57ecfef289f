// SPDX-License-Identifier: Apache-2.0
#include "core/fd.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <string_view>

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

Result<int> keep_if_regular(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Error e = errno_error("fstat");
    close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Error{EINVAL, "not a regular file"};
  }
  return fd;
}

}  // namespace

Result<int> open_in_root(const std::string& root_dir, const std::string& path) {
  Fd root(open(root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return errno_error("open root " + root_dir);
  struct open_how how {};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof(how));
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0) {
    if (errno == ENOSYS) return Error{ENOSYS, "openat2 not supported (kernel < 5.6)"};
    return errno_error("open " + path + " in root " + root_dir);
  }
  return keep_if_regular(static_cast<int>(fd));
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
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return errno_error("open " + path);
  return keep_if_regular(fd);
}

Result<int> create_output_file(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                0600);
  if (fd < 0) {
    if (errno == ELOOP) return Error{ELOOP, "refusing to write through a symlink"};
    return errno_error("open");
  }
  Result<int> regular = keep_if_regular(fd);
  if (!regular) return regular;
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    Error e = errno_error("fcntl");
    close(fd);
    return e;
  }
  return fd;
}

}  // namespace lw
