/* SPDX-License-Identifier: Apache-2.0 */
// Per process: which object's malloc, free, operator new... are the ones
// calls reach, decided the way the dynamic linker decides (pure: no /proc,
// no kernel; the attacher feeds it the mapped objects).
//
// The global search order (glibc's rtld): the executable, then the
// LD_PRELOAD objects in environment order, then /etc/ld.so.preload's, then
// every DT_NEEDED dependency breadth-first from that list. A call to
// `malloc` binds to the first object in that order that exports it, so only
// that definition is probed: libc's malloc under jemalloc is never reached
// through the symbol and probing it too would only cost traps. Objects
// mapped later (dlopen) come after, in address order.
//
// A statically linked executable has no search order: its own symbols
// (.symtab) are the allocator. A stripped one has none, and nothing is
// probed (never guess an offset). A Go executable is never probed itself
// (goroutine stacks move; a uretprobe there crashes the process): only the
// C libraries it maps through cgo are.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/probes/allocator_probes.h"
#include "core/symbols/elf_file.h"

namespace lw {

// One mapped ELF object of a process.
struct LoadedObject {
  std::string path;                        // as the target sees it (/proc/PID/maps)
  std::shared_ptr<const ElfFile> elf;
};

// What the process's environment and root say about preloading.
struct PreloadList {
  std::vector<std::string> names;          // LD_PRELOAD, then /etc/ld.so.preload
};

// LD_PRELOAD out of /proc/PID/environ bytes (NUL-separated, untrusted: the
// caller bounds the read). Entries are separated by spaces or colons, as
// glibc splits them. At most `max_entries` are kept.
std::vector<std::string> parse_ld_preload_environ(std::string_view environ,
                                                  size_t max_entries = 64);
// /etc/ld.so.preload contents: whitespace- or colon-separated; '#' starts a comment.
std::vector<std::string> parse_ld_so_preload(std::string_view text, size_t max_entries = 64);

// Index in `objects` of the object a DT_NEEDED or preload name refers to:
// exact path, else an object whose DT_SONAME or file name equals the
// name's last component. nullopt when none is mapped.
std::optional<size_t> match_object(const std::vector<LoadedObject>& objects,
                                   std::string_view name);

struct SearchOrder {
  std::vector<size_t> order;               // indices into objects, global scope first
  std::vector<std::string> missing_needed; // DT_NEEDED names not mapped (yet)
  std::vector<std::string> missing_preload;
};
SearchOrder global_search_order(const std::vector<LoadedObject>& objects, size_t exe,
                                const PreloadList& preload);

// One probe to place.
struct PlannedProbe {
  size_t object = 0;                       // index into objects
  std::string role;                        // ProbeRole::name
  ProbeSpec spec;
  ElfSymbol symbol;
  std::vector<std::string> aliases;        // other probed names at the same address
};

enum class Support { kFull, kPartial, kUnsupported, kPending };
const char* support_name(Support s);

struct AllocatorPlan {
  Support support = Support::kPending;
  std::string reason;                      // for partial, unsupported and pending
  std::optional<size_t> allocator;         // object whose malloc wins
  std::string family;                      // allocator_family() of it, or "unknown"
  bool static_exe = false;
  bool go = false;
  SearchOrder search;
  std::vector<PlannedProbe> probes;        // empty unless full or partial
};

// `exe`: index of the executable in `objects`.
AllocatorPlan plan_allocator_probes(const std::vector<LoadedObject>& objects, size_t exe,
                                    const PreloadList& preload,
                                    const std::vector<ProbeRole>& roles);

}  // namespace lw
