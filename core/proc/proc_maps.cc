// SPDX-License-Identifier: Apache-2.0
#include "core/proc/proc_maps.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

namespace lw {

namespace {

// Paths longer than PATH_MAX cannot be opened anyway; a longer one means the
// text is not what the kernel wrote.
constexpr size_t kMaxPathBytes = 4096;
// Everything before the path (addresses, perms, offset, dev, inode, padding)
// fits comfortably in this; it bounds the work spent on one garbage line.
constexpr size_t kMaxLineBytes = kMaxPathBytes + 256;
constexpr size_t kMaxMapsBytes = 64u << 20;
constexpr size_t kReadChunkBytes = 64u << 10;
constexpr std::string_view kDeletedSuffix = " (deleted)";

// A cursor over one line. Each method consumes one field and returns false
// if it is not there; the line is then dropped as a whole.
class LineCursor {
 public:
  explicit LineCursor(std::string_view s) : s_(s) {}

  // At least one hex digit, no overflow past `max_digits` significant ones.
  bool hex(uint64_t* out, size_t max_digits = 16) {
    uint64_t v = 0;
    size_t n = 0, significant = 0;
    while (pos_ < s_.size()) {
      int d = hex_digit(s_[pos_]);
      if (d < 0) break;
      if (significant > 0 || d != 0) ++significant;
      if (significant > max_digits) return false;
      v = (v << 4) | static_cast<uint64_t>(d);
      ++pos_;
      ++n;
    }
    *out = v;
    return n > 0;
  }

  bool dec(uint64_t* out) {
    uint64_t v = 0;
    size_t n = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (v > (UINT64_MAX - d) / 10) return false;
      v = v * 10 + d;
      ++pos_;
      ++n;
    }
    *out = v;
    return n > 0;
  }

  bool expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  // `c` or `alt`; reports which in *is_c.
  bool either(char c, char alt, bool* is_c) {
    if (pos_ >= s_.size() || (s_[pos_] != c && s_[pos_] != alt)) return false;
    *is_c = s_[pos_++] == c;
    return true;
  }

  void skip_spaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }

  std::string_view rest() const { return s_.substr(pos_); }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Kernel format (fs/proc/task_mmu.c show_map_vma):
//   start-end perms offset major:minor inode <padding> path
// The path is the rest of the line and may contain spaces. *path is set to
// the path's text (a view into `line`).
bool parse_line(std::string_view line, MapEntry* e, std::string_view* path_out) {
  if (line.size() > kMaxLineBytes) return false;
  LineCursor c(line);
  uint64_t major = 0, minor = 0;
  bool ok = c.hex(&e->start) && c.expect('-') && c.hex(&e->end) && c.expect(' ') &&
            c.either('r', '-', &e->readable) && c.either('w', '-', &e->writable) &&
            c.either('x', '-', &e->executable) && c.either('p', 's', &e->is_private) &&
            c.expect(' ') && c.hex(&e->offset) && c.expect(' ') && c.hex(&major, 8) &&
            c.expect(':') && c.hex(&minor, 8) && c.expect(' ') && c.dec(&e->inode);
  if (!ok || e->start >= e->end) return false;
  e->dev_major = static_cast<uint32_t>(major);
  e->dev_minor = static_cast<uint32_t>(minor);

  std::string_view rest = c.rest();
  // The inode must be followed by a separator (or end the line); "123abc" is
  // a corrupt number, not inode 123 with path "abc".
  if (!rest.empty() && rest[0] != ' ') return false;
  c.skip_spaces();
  std::string_view path = c.rest();
  if (path.size() > kDeletedSuffix.size() && path.ends_with(kDeletedSuffix)) {
    path.remove_suffix(kDeletedSuffix.size());
    e->deleted = true;
  }
  if (path.size() > kMaxPathBytes) return false;
  *path_out = path;
  return true;
}

}  // namespace

MapPath MapsParser::intern(std::string_view path) {
  if (path.empty()) return MapPath();
  auto it = paths_.find(path);
  if (it != paths_.end()) return it->second;
  const size_t cost = memory_of(path.size());
  if (out_.path_bytes + cost > kMaxMapPathBytes) {
    ++out_.paths_dropped;
    return intern(kDroppedPath);  // its own cost is a few dozen bytes, once
  }
  auto stored = std::make_shared<const std::string>(path);
  out_.path_bytes += cost;
  MapPath p(stored);
  paths_.emplace(std::string_view(*stored), p);
  return p;
}

bool MapsParser::parse_one(std::string_view line, MapEntry* e) {
  std::string_view path;
  if (!parse_line(line, e, &path)) return false;
  e->path = intern(path);
  return true;
}

bool MapsParser::feed(std::string_view line) {
  MapEntry e;
  std::string_view path;
  // The kernel lists mappings in ascending, disjoint order, and
  // find_mapping() relies on it: a line that breaks the order is malformed.
  if (!parse_line(line, &e, &path) || (!out_.entries.empty() && e.start < out_.entries.back().end)) {
    ++out_.malformed_lines;
    return false;
  }
  if (out_.entries.size() >= kMaxMapEntries) {
    ++out_.entries_dropped;
    return false;
  }
  e.path = intern(path);
  out_.entries.push_back(std::move(e));
  return true;
}

ParsedMaps MapsParser::take() {
  paths_.clear();
  out_.entries.shrink_to_fit();
  return std::exchange(out_, ParsedMaps{});
}

ParsedMaps parse_proc_maps(std::string_view text) {
  MapsParser parser;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty()) parser.feed(line);
  }
  return parser.take();
}

Result<size_t> read_lines(const std::string& path, size_t max_bytes, size_t max_line_bytes,
                          const std::function<void(std::string_view)>& on_line) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + path, errno);
  // A chunk holds whole lines (a line is at most max_line_bytes), the cut
  // line carried to the next read.
  std::string buf(std::max(kReadChunkBytes, 2 * max_line_bytes), '\0');
  size_t have = 0, total = 0, cut = 0;
  bool skipping = false;  // inside a line longer than max_line_bytes
  for (;;) {
    if (total >= max_bytes) {
      // The last line is probably cut; never parse half a line as a whole one.
      if (have > 0 || skipping) ++cut;
      have = 0;
      break;
    }
    ssize_t n = read(fd, buf.data() + have, std::min(buf.size() - have, max_bytes - total));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return errno_error("read " + path, err);
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
    std::string_view data(buf.data(), have + static_cast<size_t>(n));
    for (size_t nl; (nl = data.find('\n')) != std::string_view::npos; data.remove_prefix(nl + 1)) {
      if (skipping) {
        skipping = false;  // the end of the overlong line, counted when it began
        continue;
      }
      on_line(data.substr(0, nl));
    }
    if (data.size() > max_line_bytes) {
      if (!skipping) ++cut;
      skipping = true;
      data = {};
    }
    have = data.size();
    if (have > 0) memmove(buf.data(), data.data(), have);
  }
  close(fd);
  if (have > 0 && !skipping) on_line(std::string_view(buf.data(), have));
  return cut;
}

Result<ParsedMaps> read_proc_maps(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/maps";
  MapsParser parser;
  Result<size_t> cut = read_lines(path, kMaxMapsBytes, kMaxLineBytes, [&](std::string_view line) {
    if (!line.empty()) parser.feed(line);
  });
  if (!cut) {
    const int err = cut.error().code;
    if (err == ENOENT || err == ESRCH) return Error{err, "process " + std::to_string(pid) + " not found"};
    if (err == EACCES || err == EPERM) return Error{err, "permission denied reading " + path};
    return cut.error();
  }
  for (size_t i = 0; i < *cut; ++i) parser.count_malformed();
  return parser.take();
}

const MapEntry* find_mapping(const ParsedMaps& maps, uint64_t addr) {
  // First entry starting after addr; the candidate is the one before it.
  auto it = std::upper_bound(maps.entries.begin(), maps.entries.end(), addr,
                             [](uint64_t a, const MapEntry& e) { return a < e.start; });
  if (it == maps.entries.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

}  // namespace lw
