/* SPDX-License-Identifier: Apache-2.0 */
// Turns (module, file offset) into function, file and line, with libdw.
// Results are cached per module identity (build-id, or path+inode+mtime when
// there is none), so a library shared by 500 processes is read once.
// Bounded: at most `max_modules` modules are kept open (least recently used
// are closed), files larger than `max_file_bytes` get symbol names only
// (no DWARF), and per-module caches are capped.
// Thread-safety: not thread-safe. Use one Symbolizer per thread, or lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace lw {

struct Frame {
  std::string function;  // demangled; "" when unknown
  std::string file;      // source file from DWARF; "" when unknown
  int line = 0;          // 0 when unknown
  std::string module;    // path of the object as the target sees it
  std::string build_id;  // lowercase hex, may be ""
  uint64_t offset = 0;   // file offset of the address within the module
  // How the unwinder found this frame: "leaf", "cfi", "fp", "hint" (the
  // return address read at operator new's entry); "" when not recorded.
  std::string unwound;
  // "native", or "python" for a CPython frame (core/python_frames.h):
  // function is the qualified name, file and line the source position,
  // module "" and offset the instruction's byte offset in its code object.
  std::string language = "native";
};

// Where to find a module's file from the daemon's point of view.
struct ModuleRef {
  std::string path;        // as in the target's /proc/PID/maps
  std::string open_path;   // path the daemon opens: /proc/PID/map_files/.. or /proc/PID/root/..
  uint64_t inode = 0;
  std::string build_id;    // if already known; else read from the file
};

struct SymbolizerLimits {
  size_t max_modules = 256;
  uint64_t max_file_bytes = 2ull << 30;
  size_t max_cached_addresses_per_module = 1 << 16;
};

class Symbolizer {
 public:
  explicit Symbolizer(SymbolizerLimits limits = {});
  ~Symbolizer();

  // Symbolizes a return address at `file_offset` in `module`. The offset is
  // of the return address itself; the lookup uses offset-1 so the call
  // instruction (not the next line) is reported. Never fails: unknown parts
  // stay empty, and errors are counted in `errors()`.
  Frame symbolize(const ModuleRef& module, uint64_t file_offset);

  uint64_t errors() const;  // modules that failed to open or parse

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Demangles an Itanium C++ name; returns the input unchanged if it is not one.
std::string demangle(const std::string& name);

}  // namespace lw
