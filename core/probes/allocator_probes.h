/* SPDX-License-Identifier: Apache-2.0 */
// Which functions leakwatch probes, as data: one table per role, each row a
// symbol and how its arguments and result are read (enum lw_func, the
// attach cookie). The resolver (allocator_resolver.h) decides, per process,
// which object's definition of each symbol is the one calls reach.
//
// Adding an allocator: add its role to the table in allocator_probes.cc.
// (CUDA's probes are not a role: they are optional, per library, and live
// in engine/cuda_probes.cc; decision cuda-memory.)
// Thread-safety: constant data after first use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bpf/leakwatch_abi.h"

namespace lw {

// Which definition of a symbol gets the probe.
enum class RoleScope {
  // The one the dynamic linker binds calls to: the first object in the
  // process's global search order that exports it (malloc, free, operator
  // new). Other definitions (libc's malloc under jemalloc) are never called
  // through the symbol and are not probed, so no call counts twice.
  kInterposed,
  // Every mapped object that defines it, exported or in .symtab: names
  // private to one allocator (mallocx, tc_malloc, mi_malloc, je_malloc),
  // which may be linked statically into several objects, each a distinct
  // allocator.
  kEveryObject,
};

// Where a row applies, by the object that provides the winning definition.
enum class ProviderClass : uint8_t {
  kAny,
  kLibstdcxx,     // libstdc++.so*: its operator new calls malloc, delete tail-calls free
  kNotLibstdcxx,  // an allocator's own operator new/delete (tcmalloc, jemalloc, mimalloc)
};

struct ProbeSpec {
  std::string symbol;
  uint32_t func;       // enum lw_func
  bool needs_return;   // a uretprobe too, at the entry
  bool required;       // the process cannot be traced without it (malloc, free)
  bool movable;        // entry-only and may move past a NULL check
  ProviderClass provider = ProviderClass::kAny;
  // Only there to lend its caller's return address to the allocation made
  // inside it (libstdc++'s plain operator new): not probed when stacks are
  // unwound from call-frame information, which finds that caller anyway
  // (decision cfi-unwinding); its body still counts as the allocator's own
  // frames.
  bool hint_only = false;
};

struct ProbeRole {
  std::string name;              // "libc", "cxx", "jemalloc", ... (API and logs)
  RoleScope scope = RoleScope::kInterposed;
  std::vector<ProbeSpec> probes;
  // Never probe inside a Go executable itself: Go moves goroutine stacks,
  // and a uretprobe's hijacked return address there crashes the process.
  // Roles apply only to non-Go objects; leave this true.
  bool skip_go_objects = true;
};

// Every role: the interposed standard functions, then jemalloc, tcmalloc
// and mimalloc's own names.
const std::vector<ProbeRole>& probe_roles();

// The allocator family an object belongs to, from the names it defines:
// "jemalloc", "tcmalloc", "mimalloc", "glibc", or "" when unknown.
// `defines(name)` answers whether the object defines that function.
template <typename Defines>
std::string allocator_family(const Defines& defines) {
  if (defines("mallocx") || defines("je_malloc") || defines("je_mallocx")) return "jemalloc";
  if (defines("tc_malloc")) return "tcmalloc";
  if (defines("mi_malloc")) return "mimalloc";
  if (defines("__libc_malloc")) return "glibc";
  return "";
}

}  // namespace lw
