#include "daemon/core/fd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

namespace lw {

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return errno_error("open");
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return errno_error("fstat");
  if (!S_ISREG(st.st_mode)) return Error{EINVAL, "not a regular file"};
  std::string text(max_bytes + 1, '\0');
  size_t len = 0;
  while (len < text.size()) {
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

}  // namespace lw
