// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/perf_map.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/platform/fd.h"

namespace lw {

namespace {

// Hex digits, with an optional "0x": at most 16 digits (a u64).
bool parse_hex(std::string_view s, uint64_t& out) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    unsigned d;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
    else return false;
    v = (v << 4) | d;
  }
  out = v;
  return true;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// The next blank-separated field of `s`, removed from it with the blanks
// after it.
std::string_view take_field(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && !is_blank(s[n])) ++n;
  std::string_view field = s.substr(0, n);
  while (n < s.size() && is_blank(s[n])) ++n;
  s.remove_prefix(n);
  return field;
}

}  // namespace

void PerfMap::feed(std::string_view bytes) {
  stats_.bytes_read += bytes.size();
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    const bool complete = nl != std::string_view::npos;
    bytes.remove_prefix(complete ? nl + 1 : bytes.size());
    if (!skipping_line_ && partial_.size() + piece.size() > limits_.max_line_bytes) {
      skipping_line_ = true;  // the rest of this line is dropped as it comes
      partial_.clear();
    }
    if (!skipping_line_) partial_.append(piece);
    if (!complete) return;
    ++stats_.lines;
    if (skipping_line_) {
      ++stats_.long_lines;
      skipping_line_ = false;
    } else {
      add_line(partial_);
    }
    partial_.clear();
  }
}

void PerfMap::add_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
  uint64_t start = 0, size = 0;
  const std::string_view start_field = take_field(line);
  const std::string_view size_field = take_field(line);
  while (!line.empty() && is_blank(line.back())) line.remove_suffix(1);
  if (!parse_hex(start_field, start) || !parse_hex(size_field, size) || size == 0 || line.empty() ||
      start + size < start) {
    ++stats_.bad_lines;
    return;
  }
  if (line.size() > limits_.max_name_bytes) {
    line = line.substr(0, limits_.max_name_bytes);
    ++stats_.names_cut;
  }
  insert(start, start + size, line);
}

void PerfMap::insert(uint64_t start, uint64_t end, std::string_view name) {
  // Every earlier entry overlapping [start, end) is gone: the runtime put
  // other code there (the one before `start` when it reaches past it).
  auto it = by_start_.lower_bound(start);
  if (it != by_start_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > start) it = prev;
  }
  while (it != by_start_.end() && it->first < end) {
    memory_bytes_ -= it->second.name.size() + kPerfMapEntryOverhead;
    it = by_start_.erase(it);
    ++stats_.entries_replaced;
  }
  const uint64_t cost = name.size() + kPerfMapEntryOverhead;
  ++generation_;  // a replacement alone changes what lookups find
  if (memory_bytes_ + cost > limits_.max_memory_bytes) {
    ++stats_.entries_refused;
    return;
  }
  by_start_.emplace_hint(it, start, Entry{end, std::string(name)});
  memory_bytes_ += cost;
  ++stats_.entries_added;
}

void PerfMap::clear() {
  by_start_.clear();
  memory_bytes_ = 0;
  partial_.clear();
  skipping_line_ = false;
  ++generation_;
}

std::optional<PerfMap::Symbol> PerfMap::lookup(uint64_t addr) const {
  auto it = by_start_.upper_bound(addr);
  if (it == by_start_.begin()) return std::nullopt;
  --it;
  if (addr >= it->second.end) return std::nullopt;
  return Symbol{it->first, it->second.end - it->first, it->second.name};
}

pid_t last_nspid(std::string_view status) {
  size_t at = 0;
  while (at < status.size()) {
    size_t nl = status.find('\n', at);
    if (nl == std::string_view::npos) nl = status.size();
    std::string_view line = status.substr(at, nl - at);
    at = nl + 1;
    if (line.substr(0, 6) != "NSpid:") continue;
    line.remove_prefix(6);
    pid_t last = 0;
    while (!line.empty()) {
      while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
      const std::string_view field = take_field(line);
      if (field.empty()) break;
      if (field.size() > 9 || field.find_first_not_of("0123456789") != std::string_view::npos) return 0;
      last = 0;
      for (char c : field) last = last * 10 + (c - '0');
    }
    return last;
  }
  return 0;
}

PerfMapFile::PerfMapFile(pid_t pid, PerfMapLimits limits) : pid_(pid), map_(limits) {}

bool PerfMapFile::edges_unchanged(int fd) const {
  auto same_at = [fd](uint64_t at, const std::string& want) {
    std::string got(want.size(), '\0');
    return pread(fd, got.data(), got.size(), static_cast<off_t>(at)) == static_cast<ssize_t>(got.size()) &&
           got == want;
  };
  return offset_ == 0 || (same_at(0, head_) && same_at(offset_ - tail_.size(), tail_));
}

bool PerfMapFile::refresh() {
  const std::string proc = "/proc/" + std::to_string(pid_);
  if (path_.empty()) {
    Result<std::string> status = read_regular_file(proc + "/status", 64 << 10);
    const pid_t nspid = status ? last_nspid(*status) : 0;
    if (nspid <= 0) return false;
    path_ = "/tmp/perf-" + std::to_string(nspid) + ".map";
  }
  PerfMapStats& stats = map_.mutable_stats();
  if (stats.file_capped) return false;
  // Inside the process's root: its symlinks cannot lead out of it, and only
  // a regular file is opened (open_in_root).
  Result<int> fd = open_in_root(proc + "/root", path_);
  if (!fd) return false;  // no map (yet): the runtime was not asked for one
  Fd owned(*fd);
  struct stat st {};
  if (fstat(owned.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const uint64_t before = map_.generation();
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (st.st_ino != ino_ || st.st_dev != dev_ || size < offset_ || !edges_unchanged(owned.get())) {
    // Replaced (jcmd writes the map anew) or truncated: the old entries
    // describe code the new file may not.
    if (offset_ > 0 || map_.entries() > 0) {
      map_.clear();
      ++stats.restarts;
    }
    offset_ = 0;
    ino_ = st.st_ino;
    dev_ = st.st_dev;
    head_.clear();
    tail_.clear();
  }
  char buf[64 << 10];
  while (offset_ < size) {
    const uint64_t allowed = map_.limits().max_file_bytes - std::min(stats.bytes_read, map_.limits().max_file_bytes);
    if (allowed == 0) {
      stats.file_capped = true;
      break;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>({sizeof(buf), size - offset_, allowed}));
    const ssize_t got = pread(owned.get(), buf, want, static_cast<off_t>(offset_));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    const std::string_view piece(buf, static_cast<size_t>(got));
    map_.feed(piece);
    offset_ += static_cast<uint64_t>(got);
    if (head_.size() < kEdgeBytes) head_.append(piece.substr(0, kEdgeBytes - head_.size()));
    tail_.append(piece.substr(piece.size() - std::min(piece.size(), kEdgeBytes)));
    if (tail_.size() > kEdgeBytes) tail_.erase(0, tail_.size() - kEdgeBytes);
  }
  return map_.generation() != before;
}

}  // namespace lw
