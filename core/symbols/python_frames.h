/* SPDX-License-Identifier: Apache-2.0 */
// CPython frames from what the BPF side stored (struct lw_py_frame): code
// objects decoded from the target's memory (qualified name, file, first
// line, location table), the line of an instruction, a bounded cache, and
// the merge of Python frames into a native stack.
// decision python-frames.
//
// Everything read from the target is hostile input: every size is bounded,
// every pointer read through a TargetMemory that may fail, and a code
// object is accepted only if its type is PyCode_Type and its first line
// matches what BPF saw (a freed and reused address gives another object).
// Thread-safety: pure functions; PythonCodeCache is not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/symbols/python_runtime.h"
#include "core/symbols/symbolizer.h"

namespace lw {

// Reads another process's memory (process_vm_readv in engine/; a byte
// buffer in tests). Returns false unless all `len` bytes were read.
class TargetMemory {
 public:
  virtual ~TargetMemory() = default;
  virtual bool read(uint64_t addr, void* out, size_t len) = 0;
};

// Bounds on what one code object may make us read.
inline constexpr size_t kPyMaxStringChars = 1024;
inline constexpr size_t kPyMaxLinetableBytes = 1u << 20;
// The longest location-table entry: a header byte and four varints of at
// most 6 bytes (the long form). Each entry covers at least one code unit
// (2 bytes), so the line of byte offset `lasti` lies in the table's first
// (lasti / 2 + 1) * 25 bytes.
inline constexpr size_t kPyMaxLocationEntryBytes = 25;

// What a code object says about itself. The location table stays in the
// target: hostile code objects may share one 1 MiB table (issue 32: 600 of
// them took 715 MiB when each kept a copy); the lines read from it are
// cached per instruction (PythonCodeCache::line).
struct PythonCode {
  std::string qualname;  // co_qualname (3.11+)
  std::string name;      // co_name
  std::string filename;  // co_filename
  int firstlineno = 0;
  uint32_t code_units = 0;        // Py_SIZE: bytecode length in code units
  uint64_t linetable_addr = 0;    // co_linetable's bytes in the target; 0: none (or oversized)
  uint32_t linetable_bytes = 0;   // its length, at most kPyMaxLinetableBytes
};

// A str object's text as UTF-8 (compact forms only, as code objects' names
// are), at most kPyMaxStringChars characters; nullopt when unreadable.
std::optional<std::string> read_py_unicode(TargetMemory& mem, const PythonLayout& l, uint64_t addr);

// The code object at `addr`, checked: its ob_type is `code_type` (when not
// 0) and, when `sig` is given, co_firstlineno's low 16 bits equal it.
std::optional<PythonCode> read_py_code(TargetMemory& mem, const PythonLayout& l, uint64_t addr,
                                       uint64_t code_type, std::optional<uint16_t> sig);

// The line of the instruction at byte offset `lasti` (PyCode_Addr2Line's
// rules over the 3.11+ location table): firstlineno when lasti < 0, 0
// when the table has no line for it (or is malformed).
int py_line_for_offset(const std::string& linetable, int firstlineno, int lasti);

// The same, reading from the target only the part of the code object's
// table that can hold `lasti` (kPyMaxLocationEntryBytes); 0 when the read
// fails. `read_bytes` (optional) receives the bytes read.
int read_py_line(TargetMemory& mem, const PythonCode& code, int lasti, uint64_t* read_bytes = nullptr);

// Decoded code objects of one process, keyed by (address, signature), at
// most `max_entries` (least recently used go), and the lines of their
// instructions, keyed by (address, signature, instruction offset), at most
// `max_lines` (all dropped when full). Entries stay valid after the target
// frees the object: they hold copies. What it holds is bounded by the
// entries, not by what the target's objects say (bytes(): about 3.5 MiB
// full with names of 1,024 characters, 1.3 MiB with real ones).
class PythonCodeCache {
 public:
  explicit PythonCodeCache(size_t max_entries = 4096, size_t max_lines = 1u << 15)
      : max_entries_(max_entries), max_lines_(max_lines) {}
  // The decoded object, reading it on a miss; nullptr when unreadable
  // (failures are not cached: the daemon may read it later).
  const PythonCode* get(TargetMemory& mem, const PythonLayout& l, uint64_t addr, uint64_t code_type,
                        uint16_t sig);
  // The line of instruction `lasti` of `code` (got from get(addr, sig)),
  // read from the target's table on a miss (read_py_line).
  int line(TargetMemory& mem, uint64_t addr, uint16_t sig, const PythonCode& code, int lasti);
  // The frame of code object `addr` at instruction `lasti` (python_frame).
  Frame frame(TargetMemory& mem, const PythonLayout& l, uint64_t addr, uint64_t code_type, uint16_t sig,
              int lasti);
  size_t size() const { return map_.size(); }
  size_t lines() const { return lines_.size(); }
  // Estimated heap bytes held (entries, their strings, the line entries).
  uint64_t bytes() const;
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t failures() const { return failures_; }
  uint64_t line_table_bytes_read() const { return table_bytes_read_; }

 private:
  using Key = std::pair<uint64_t, uint16_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.first * 65537 + k.second); }
  };
  struct LineKeyHash {
    size_t operator()(const std::pair<Key, int>& k) const {
      return KeyHash()(k.first) * 31 + std::hash<int>()(k.second);
    }
  };
  size_t max_entries_;
  size_t max_lines_;
  std::list<std::pair<Key, PythonCode>> lru_;  // most recent first
  std::unordered_map<Key, std::list<std::pair<Key, PythonCode>>::iterator, KeyHash> map_;
  std::unordered_map<std::pair<Key, int>, int, LineKeyHash> lines_;
  uint64_t string_bytes_ = 0;  // the entries' strings
  uint64_t hits_ = 0, misses_ = 0, failures_ = 0, table_bytes_read_ = 0;
};

// A Python frame as shown: function (qualified name), file, `line`;
// language "python". `unreadable` when the code object could not be read.
Frame python_frame(const PythonCode* code, int lasti, int line);

// Merges Python frames (innermost first; entry[i]: frame i is the first its
// evaluation loop ran) into a native stack (leaf first; is_eval[i]: frame i
// is in _PyEval_EvalFrameDefault). Each evaluation frame is replaced by the
// Python frames from the cursor up to and including the next entry frame;
// native frames above and below stay, and so does an evaluation frame with
// no Python frame left (the chain was cut at LW_MAX_PY_FRAMES). Python
// frames left once the native stack ends (it was cut short, or had no
// evaluation frame) go after it.
std::vector<Frame> merge_python_frames(const std::vector<Frame>& native, const std::vector<bool>& is_eval,
                                       const std::vector<Frame>& python, const std::vector<bool>& entry);

// The same over native frames in groups (one return address symbolized
// into its inline chain): group g is frames [starts[g], starts[g+1]), and
// is_eval[g] replaces the whole group.
std::vector<Frame> merge_python_frames_grouped(const std::vector<Frame>& native, const std::vector<size_t>& starts,
                                               const std::vector<bool>& is_eval, const std::vector<Frame>& python,
                                               const std::vector<bool>& entry);

// The innermost Python frame of a stack, or nullptr.
const Frame* innermost_python_frame(const std::vector<Frame>& frames);

}  // namespace lw
