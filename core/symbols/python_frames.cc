// SPDX-License-Identifier: Apache-2.0
#include "core/symbols/python_frames.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lw {

namespace {

template <typename T>
bool read_value(TargetMemory& mem, uint64_t addr, T& out) {
  return mem.read(addr, &out, sizeof(out));
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x110000) {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += "\xef\xbf\xbd";  // U+FFFD
  }
}

// The location table's variable-length integers: 6 bits a byte, low
// first, bit 6 set on every byte but the last.
bool read_varint(const std::string& t, size_t& i, uint32_t& out) {
  uint32_t v = 0;
  for (int shift = 0; shift < 32; shift += 6) {
    if (i >= t.size()) return false;
    const auto b = static_cast<uint8_t>(t[i++]);
    v |= static_cast<uint32_t>(b & 0x3f) << shift;
    if (!(b & 0x40)) {
      out = v;
      return true;
    }
  }
  return false;
}

bool read_svarint(const std::string& t, size_t& i, int& out) {
  uint32_t v = 0;
  if (!read_varint(t, i, v)) return false;
  out = (v & 1) ? -static_cast<int>(v >> 1) : static_cast<int>(v >> 1);
  return true;
}

}  // namespace

std::optional<std::string> read_py_unicode(TargetMemory& mem, const PythonLayout& l, uint64_t addr) {
  if (!addr) return std::nullopt;
  int64_t length = 0;
  uint32_t state = 0;
  if (!read_value(mem, addr + l.unicode_length, length) || !read_value(mem, addr + l.unicode_state, state))
    return std::nullopt;
  // state: interned (2 bits), kind (3), compact (1), ascii (1), ...
  const uint32_t kind = (state >> 2) & 7;
  const bool compact = (state >> 5) & 1;
  const bool ascii = (state >> 6) & 1;
  if (!compact || length < 0) return std::nullopt;
  const size_t n = static_cast<size_t>(length) > kPyMaxStringChars ? kPyMaxStringChars : static_cast<size_t>(length);
  if (ascii) {
    std::string s(n, '\0');
    if (n && !mem.read(addr + l.unicode_ascii_data, s.data(), n)) return std::nullopt;
    for (char& c : s)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    return s;
  }
  if (kind != 1 && kind != 2 && kind != 4) return std::nullopt;
  std::vector<uint8_t> raw(n * kind);
  if (n && !mem.read(addr + l.unicode_compact_data, raw.data(), raw.size())) return std::nullopt;
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = 0;
    memcpy(&c, raw.data() + i * kind, kind);  // little-endian
    append_utf8(s, c);
  }
  return s;
}

std::optional<PythonCode> read_py_code(TargetMemory& mem, const PythonLayout& l, uint64_t addr,
                                       uint64_t code_type, std::optional<uint16_t> sig) {
  if (!addr || (addr & 7)) return std::nullopt;
  uint8_t hdr[256];
  const size_t hdr_len = l.code_bytecode;
  if (hdr_len > sizeof(hdr) || !mem.read(addr, hdr, hdr_len)) return std::nullopt;
  auto u64 = [&](size_t off) {
    uint64_t v = 0;
    if (off + 8 <= hdr_len) memcpy(&v, hdr + off, 8);
    return v;
  };
  int32_t firstlineno = 0;
  memcpy(&firstlineno, hdr + l.code_firstlineno, 4);
  if (code_type && u64(8) != code_type) return std::nullopt;  // ob_type: not (or no longer) a code object
  if (sig && static_cast<uint16_t>(firstlineno) != *sig) return std::nullopt;  // another object now
  PythonCode c;
  c.firstlineno = firstlineno;
  const int64_t size = static_cast<int64_t>(u64(l.code_size));
  if (size < 0 || size > (1 << 28)) return std::nullopt;
  c.code_units = static_cast<uint32_t>(size);
  auto filename = read_py_unicode(mem, l, u64(l.code_filename));
  auto name = read_py_unicode(mem, l, u64(l.code_name));
  if (!filename || !name) return std::nullopt;
  c.filename = std::move(*filename);
  c.name = std::move(*name);
  auto qualname = read_py_unicode(mem, l, u64(l.code_qualname));
  c.qualname = qualname ? std::move(*qualname) : c.name;
  // co_linetable is a bytes object; a missing or oversized one leaves
  // every line at 0, not a failure. Only where it is is kept (read_py_line).
  const uint64_t table = u64(l.code_linetable);
  int64_t table_len = 0;
  if (table && read_value(mem, table + l.bytes_size, table_len) && table_len > 0 &&
      static_cast<uint64_t>(table_len) <= kPyMaxLinetableBytes) {
    c.linetable_addr = table + l.bytes_data;
    c.linetable_bytes = static_cast<uint32_t>(table_len);
  }
  return c;
}

int read_py_line(TargetMemory& mem, const PythonCode& code, int lasti, uint64_t* read_bytes) {
  if (lasti < 0) return code.firstlineno;
  // Past the bytecode: no instruction there, so no line (nothing read).
  if (static_cast<uint64_t>(lasti) >= uint64_t{code.code_units} * 2 || !code.linetable_addr) return 0;
  const uint64_t needed = (static_cast<uint64_t>(lasti) / 2 + 1) * kPyMaxLocationEntryBytes;
  std::string prefix(static_cast<size_t>(std::min<uint64_t>(code.linetable_bytes, needed)), '\0');
  if (read_bytes) *read_bytes = prefix.size();
  if (!mem.read(code.linetable_addr, prefix.data(), prefix.size())) return 0;
  return py_line_for_offset(prefix, code.firstlineno, lasti);
}

int py_line_for_offset(const std::string& t, int firstlineno, int lasti) {
  if (lasti < 0) return firstlineno;
  // 64 bits: a hostile table's deltas must not overflow (fuzz_python).
  int64_t line = firstlineno;
  int64_t addr = 0;  // bytes
  size_t i = 0;
  while (i < t.size()) {
    const auto b = static_cast<uint8_t>(t[i++]);
    if (!(b & 0x80)) return 0;  // every entry starts with bit 7 set
    const int code = (b >> 3) & 15;
    const int units = (b & 7) + 1;
    int64_t entry_line = line;
    int delta = 0;
    uint32_t skip = 0;
    switch (code) {
      case 15:  // no location
        entry_line = -1;
        break;
      case 14:  // long form: line delta, end line delta, column, end column
        if (!read_svarint(t, i, delta) || !read_varint(t, i, skip) || !read_varint(t, i, skip) ||
            !read_varint(t, i, skip))
          return 0;
        line += delta;
        entry_line = line;
        break;
      case 13:  // no column: line delta
        if (!read_svarint(t, i, delta)) return 0;
        line += delta;
        entry_line = line;
        break;
      case 10:
      case 11:
      case 12:  // one line, delta code - 10, then start and end column
        line += code - 10;
        entry_line = line;
        i += 2;
        break;
      default:  // short form: same line, one column byte
        i += 1;
        break;
    }
    if (i > t.size()) return 0;
    const int64_t end = addr + units * 2;
    if (lasti < end) return entry_line < 0 || entry_line > INT32_MAX ? 0 : static_cast<int>(entry_line);
    addr = end;
  }
  return 0;
}

const PythonCode* PythonCodeCache::get(TargetMemory& mem, const PythonLayout& l, uint64_t addr,
                                       uint64_t code_type, uint16_t sig) {
  const Key key{addr, sig};
  if (auto it = map_.find(key); it != map_.end()) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->second;
  }
  ++misses_;
  std::optional<PythonCode> code = read_py_code(mem, l, addr, code_type, sig);
  if (!code) {
    ++failures_;
    return nullptr;
  }
  if (max_entries_ == 0) return nullptr;
  while (map_.size() >= max_entries_) {
    const PythonCode& old = lru_.back().second;
    string_bytes_ -= old.qualname.capacity() + old.name.capacity() + old.filename.capacity();
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
  string_bytes_ += code->qualname.capacity() + code->name.capacity() + code->filename.capacity();
  lru_.emplace_front(key, std::move(*code));
  map_[key] = lru_.begin();
  return &lru_.front().second;
}

int PythonCodeCache::line(TargetMemory& mem, uint64_t addr, uint16_t sig, const PythonCode& code, int lasti) {
  const std::pair<Key, int> key{{addr, sig}, lasti};
  if (auto it = lines_.find(key); it != lines_.end()) return it->second;
  uint64_t read = 0;
  const int line = read_py_line(mem, code, lasti, &read);
  table_bytes_read_ += read;
  if (max_lines_ == 0) return line;
  if (lines_.size() >= max_lines_) lines_.clear();
  lines_.emplace(key, line);
  return line;
}

Frame PythonCodeCache::frame(TargetMemory& mem, const PythonLayout& l, uint64_t addr, uint64_t code_type,
                             uint16_t sig, int lasti) {
  const PythonCode* code = get(mem, l, addr, code_type, sig);
  return python_frame(code, lasti, code ? line(mem, addr, sig, *code, lasti) : 0);
}

uint64_t PythonCodeCache::bytes() const {
  // A list node and a map node per entry; a map node per line.
  constexpr uint64_t kEntry = sizeof(std::pair<Key, PythonCode>) + 16 + sizeof(Key) + 8 + 16 + 8;
  constexpr uint64_t kLine = sizeof(std::pair<Key, int>) + sizeof(int) + 16 + 8;
  return map_.size() * kEntry + string_bytes_ + lines_.size() * kLine;
}

Frame python_frame(const PythonCode* code, int lasti, int line) {
  Frame f;
  f.language = "python";
  f.unwound = "python";
  f.offset = lasti < 0 ? 0 : static_cast<uint64_t>(lasti);
  if (!code) {
    f.function = "<unreadable Python code object>";
    return f;
  }
  f.function = code->qualname.empty() ? code->name : code->qualname;
  f.file = code->filename;
  f.line = line;
  return f;
}

std::vector<Frame> merge_python_frames_grouped(const std::vector<Frame>& native, const std::vector<size_t>& starts,
                                               const std::vector<bool>& is_eval, const std::vector<Frame>& python,
                                               const std::vector<bool>& entry) {
  std::vector<Frame> out;
  out.reserve(native.size() + python.size());
  size_t py = 0;
  for (size_t g = 0; g < starts.size(); ++g) {
    const size_t begin = std::min(starts[g], native.size());
    const size_t end = g + 1 < starts.size() ? std::min(starts[g + 1], native.size()) : native.size();
    if (g < is_eval.size() && is_eval[g] && py < python.size()) {
      // This evaluation loop's frames: up to and including its entry frame.
      while (py < python.size()) {
        out.push_back(python[py]);
        const bool last = py < entry.size() && entry[py];
        ++py;
        if (last) break;
      }
      continue;
    }
    for (size_t i = begin; i < end; ++i) out.push_back(native[i]);
  }
  for (; py < python.size(); ++py) out.push_back(python[py]);
  return out;
}

std::vector<Frame> merge_python_frames(const std::vector<Frame>& native, const std::vector<bool>& is_eval,
                                       const std::vector<Frame>& python, const std::vector<bool>& entry) {
  std::vector<size_t> starts(native.size());
  for (size_t i = 0; i < starts.size(); ++i) starts[i] = i;
  return merge_python_frames_grouped(native, starts, is_eval, python, entry);
}

const Frame* innermost_python_frame(const std::vector<Frame>& frames) {
  for (const Frame& f : frames)
    if (f.language == "python") return &f;
  return nullptr;
}

}  // namespace lw
