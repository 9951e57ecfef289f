/* SPDX-License-Identifier: Apache-2.0 */
// Turns (module, file offset) into function, file and line, with libdw.
// Results are cached per module identity (build-id with the file's device
// and inode, or path+dev+inode when there is none), so a library shared by
// 500 processes is read once, and a file that copies another's build-id
// never shares its symbols (decision file-identity).
//
// Debug information: the object's own .symtab and DWARF, else a separate
// debug file found by core/symbols/debug_file.h (build-id directories, debug links,
// the debuginfod cache, in the target's root and the daemon's), else the
// object's .gnu_debugdata (MiniDebugInfo). libdwfl is given that file
// through our own find_debuginfo callback, never its standard one: the
// standard one contacts debuginfod servers by itself whenever
// DEBUGINFOD_URLS is in the environment (docs/architecture.md,
// "Symbolization"), and decompresses .gnu_debugdata without a bound.
//
// One return address may expand to several frames: the chain of functions
// inlined at that address (DWARF inlined subroutines), innermost first and
// marked `inlined`, then the function the code physically lies in.
//
// Bounded: at most `max_modules` modules are kept open (least recently used
// are closed), files larger than `max_file_bytes` get symbol names only
// (no DWARF), compressed sections are inflated by libelf only within
// `max_inflated_bytes` (checked on the section headers before libdwfl sees
// a file), and per-module caches are capped.
// Thread-safety: not thread-safe. Use one Symbolizer per thread, or lock
// (core/symbols/symbol_service.h runs one on its own thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/symbols/debug_file.h"
#include "core/platform/result.h"

namespace lw {

struct Frame {
  std::string function;  // demangled; "" when unknown (show frame_display_name())
  std::string file;      // source file from DWARF; "" when unknown
  int line = 0;          // 0 when unknown
  std::string module;    // path of the object as the target sees it
  std::string build_id;  // lowercase hex, may be ""
  uint64_t offset = 0;   // file offset of the return address within the module
  // Inlined into the next frame, which has the same module and offset.
  // Stack ids (core/symbols/stack_id.h) skip inlined frames.
  bool inlined = false;
  // How the unwinder found this frame: "leaf", "cfi", "fp", "hint" (the
  // return address read at operator new's entry); "" when not recorded.
  std::string unwound;
  // "native", or "python" for a CPython frame (core/symbols/python_frames.h):
  // function is the qualified name, file and line the source position,
  // module "" and offset the instruction's byte offset in its code object.
  std::string language = "native";
};

// What a reader is shown for a frame: the function, or "module+0xOFFSET"
// (the module's file name, the hex file offset) when it has none: never a
// bare "?". "[unknown]+0x..." when even the module is unknown.
std::string frame_display_name(const Frame& frame);

// Where to find a module's file from the daemon's point of view.
struct ModuleRef {
  std::string path;        // as in the target's /proc/PID/maps
  std::string open_path;   // path the daemon opens: /proc/PID/map_files/.. or /proc/PID/root/..
  uint64_t inode = 0;
  std::string build_id;    // if already known; else read from the file
  uint64_t dev = 0;        // makedev(major, minor) from /proc/PID/maps
  // The target's root ("/proc/PID/root"): `path` is tried there when
  // open_path fails (the mapping is gone), and debug files are searched
  // there first. "" for none.
  std::string root;
};

// Why a module's frames carry no names, as the API says it (docs/api.md,
// `symbols_missing`); "" when they have names or the module simply has no
// symbol at the address.
inline constexpr const char* kSymbolsFileGone = "file_gone";
inline constexpr const char* kSymbolsFileReplaced = "file_replaced";
inline constexpr const char* kSymbolsUnreadable = "file_unreadable";
inline constexpr const char* kSymbolsNoSymbols = "no_symbols";

struct SymbolizerLimits {
  size_t max_modules = 256;
  uint64_t max_file_bytes = 2ull << 30;
  size_t max_cached_addresses_per_module = 1 << 16;
  // What libelf may inflate for the open modules' compressed sections
  // (ElfDebugLinks::inflated_*; config symbols.max_inflated_bytes). A
  // module over it alone gets no DWARF (names only; no libdwfl view at all
  // when its symbol tables are over it); modules together over it close
  // the least recently used.
  uint64_t max_inflated_bytes = 128u << 20;
};

// Counters of one Symbolizer (plain values, read on its own thread).
struct SymbolizerStats {
  uint64_t module_errors = 0;     // modules that failed to open or parse
  uint64_t modules_opened = 0;
  // Modules by where their symbols came from (DebugSource).
  uint64_t modules_self = 0, modules_build_id_dir = 0, modules_debuglink = 0,
           modules_debugdata = 0, modules_debuginfod = 0, modules_no_debug_info = 0;
  DebugLookupStats lookups;       // debug files refused (wrong build-id, CRC, ...)
  // Files whose compressed sections declare more than max_inflated_bytes:
  // their DWARF (or symbol tables) never reach libdw (issue 32).
  uint64_t inflated_refused = 0;
  uint64_t inflated_bytes = 0;    // gauge: declared sizes the open modules may inflate
  uint64_t inflated_evictions = 0;  // modules closed to keep them under the bound
};

class Symbolizer {
 public:
  explicit Symbolizer(SymbolizerLimits limits = {}, DebugSearchOptions search = {});
  ~Symbolizer();

  // Symbolizes a return address at `file_offset` in `module`. The offset is
  // of the return address itself; the lookup uses offset-1 so the call
  // instruction (not the next line) is reported. Never fails: unknown parts
  // stay empty, and errors are counted. Returns the physical frame (the
  // last of symbolize_inline()).
  Frame symbolize(const ModuleRef& module, uint64_t file_offset);
  // The same address with its inline chain: innermost first (inlined =
  // true), the physical function last; at least one frame.
  std::vector<Frame> symbolize_inline(const ModuleRef& module, uint64_t file_offset);

  // What the symbolizer has for a module; opens it if needed.
  struct ModuleInfo {
    bool opened = false;
    std::string build_id;  // as read from its file, "" when it has none
    DebugSource source = DebugSource::kNone;
    bool has_dwarf = false;  // file:line available (DWARF found and used)
    // A debug file would be used if one arrived (not over max_file_bytes).
    bool wants_debug_file = false;
    // Not opened: why (kSymbolsFileGone, kSymbolsFileReplaced,
    // kSymbolsUnreadable).
    const char* failure = "";
  };
  ModuleInfo module_info(const ModuleRef& module);
  // Closes the module, so that its next use opens it again and looks for
  // debug information again (a debuginfod fetch just completed).
  void forget(const ModuleRef& module);

  uint64_t errors() const;  // modules that failed to open or parse
  SymbolizerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The key under which a module's symbols are shared: its build-id with the
// device and inode the kernel showed for the mapping, or its open path,
// device and inode without a build-id. Never the build-id alone: any user
// can link another program's build-id into a binary of their own.
std::string shared_module_key(const ModuleRef& module);

// Demangles an Itanium C++ name; returns the input unchanged if it is not one.
std::string demangle(const std::string& name);

}  // namespace lw
