// SPDX-License-Identifier: Apache-2.0
#include "core/probes/allocator_probes.h"

#include <string_view>
#include <utility>

namespace lw {

namespace {

// Shorthands for the table rows.
ProbeSpec ret(std::string s, uint32_t f, ProviderClass p = ProviderClass::kAny) {
  return {std::move(s), f, true, false, false, p};
}
ProbeSpec release(std::string s, ProviderClass p = ProviderClass::kAny) {
  return {std::move(s), LW_FUNC_FREE, false, false, true, p};
}

// The standard C and C++ entry points: whoever exports them first wins.
ProbeRole interposed_role() {
  constexpr auto kStd = ProviderClass::kLibstdcxx;
  constexpr auto kOwn = ProviderClass::kNotLibstdcxx;
  ProbeRole r;
  r.name = "libc";
  r.scope = RoleScope::kInterposed;
  r.probes = {
      {"malloc", LW_FUNC_MALLOC, true, true, false},
      {"free", LW_FUNC_FREE, false, true, true},
      ret("calloc", LW_FUNC_CALLOC),
      ret("realloc", LW_FUNC_REALLOC),
      ret("reallocarray", LW_FUNC_REALLOCARRAY),
      ret("reallocf", LW_FUNC_REALLOCF),  // BSD; mimalloc exports it
      ret("posix_memalign", LW_FUNC_POSIX_MEMALIGN),
      ret("aligned_alloc", LW_FUNC_ALIGNED),
      ret("memalign", LW_FUNC_ALIGNED),
      ret("valloc", LW_FUNC_MALLOC),
      ret("pvalloc", LW_FUNC_MALLOC),  // the requested size
      release("cfree"),
      // sbrk outside malloc is kind mmap; glibc's sbrk has no frame
      // pointer, so only its return probe sees the caller.
      ret("sbrk", LW_FUNC_SBRK),
  };
  // operator new, every variant takes the size first.
  //  - libstdc++'s calls malloc: entry-only probes that lend the caller's
  //    return address to the malloc inside (lw_new_enter); a return probe
  //    there would break exceptions thrown through new.
  //  - an allocator's own (jemalloc, tcmalloc, mimalloc) allocates without
  //    calling malloc (checked by disassembly on Debian 12's builds): it
  //    needs a return probe; see decision allocator-operator-new for the
  //    bad_alloc caveat.
  for (const char* s : {"_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
                        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
                        "_ZnwmSt11align_val_tRKSt9nothrow_t",
                        "_ZnamSt11align_val_tRKSt9nothrow_t"}) {
    // The aligned variants round the size up before calling aligned_alloc:
    // their probe also supplies the size asked of new, so they stay.
    const bool aligned = std::string_view(s).find("align_val_t") != std::string_view::npos;
    r.probes.push_back({s, LW_FUNC_NEW, false, false, false, kStd, !aligned});
    r.probes.push_back(ret(s, LW_FUNC_MALLOC, kOwn));
  }
  // operator delete: libstdc++'s tail-calls free (probed once there);
  // an allocator's own frees by itself.
  for (const char* s : {"_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t",
                        "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
                        "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
                        "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                        "_ZdaPvSt11align_val_tRKSt9nothrow_t"})
    r.probes.push_back(release(s, kOwn));
  return r;
}

// jemalloc's non-standard API, unprefixed (Debian's libjemalloc) and with
// the je_ prefix of builds that keep the system malloc (statically linked
// copies, e.g. upstream redis).
ProbeRole jemalloc_role() {
  ProbeRole r;
  r.name = "jemalloc";
  r.scope = RoleScope::kEveryObject;
  for (const char* prefix : {"", "je_"}) {
    auto name = [&](const char* s) { return std::string(prefix) + s; };
    // mallocx(size, flags): MALLOCX_ALIGN/ZERO change the block, not the size asked.
    r.probes.push_back(ret(name("mallocx"), LW_FUNC_MALLOC));
    r.probes.push_back(ret(name("rallocx"), LW_FUNC_REALLOC));   // (ptr, size, flags)
    r.probes.push_back(ret(name("xallocx"), LW_FUNC_XALLOCX));   // resizes in place
    r.probes.push_back(release(name("sdallocx")));               // (ptr, size, flags)
    r.probes.push_back(release(name("dallocx")));                // (ptr, flags)
    if (*prefix) {
      r.probes.push_back(ret(name("malloc"), LW_FUNC_MALLOC));
      r.probes.push_back(release(name("free")));
      r.probes.push_back(ret(name("calloc"), LW_FUNC_CALLOC));
      r.probes.push_back(ret(name("realloc"), LW_FUNC_REALLOC));
      r.probes.push_back(ret(name("posix_memalign"), LW_FUNC_POSIX_MEMALIGN));
      r.probes.push_back(ret(name("aligned_alloc"), LW_FUNC_ALIGNED));
      r.probes.push_back(ret(name("memalign"), LW_FUNC_ALIGNED));
      r.probes.push_back(ret(name("valloc"), LW_FUNC_MALLOC));
    }
  }
  return r;
}

// gperftools' tc_* API. Most are aliases of malloc/new/delete in the same
// object (same address): those are probed once.
ProbeRole tcmalloc_role() {
  ProbeRole r;
  r.name = "tcmalloc";
  r.scope = RoleScope::kEveryObject;
  for (const char* s : {"tc_malloc", "tc_malloc_skip_new_handler", "tc_valloc", "tc_pvalloc",
                        "tc_new", "tc_newarray", "tc_new_nothrow", "tc_newarray_nothrow",
                        "tc_new_aligned", "tc_newarray_aligned", "tc_new_aligned_nothrow",
                        "tc_newarray_aligned_nothrow"})
    r.probes.push_back(ret(s, LW_FUNC_MALLOC));
  r.probes.push_back(ret("tc_calloc", LW_FUNC_CALLOC));
  r.probes.push_back(ret("tc_realloc", LW_FUNC_REALLOC));
  r.probes.push_back(ret("tc_memalign", LW_FUNC_ALIGNED));
  r.probes.push_back(ret("tc_posix_memalign", LW_FUNC_POSIX_MEMALIGN));
  for (const char* s : {"tc_free", "tc_free_sized", "tc_cfree", "tc_delete", "tc_deletearray",
                        "tc_delete_nothrow", "tc_deletearray_nothrow", "tc_delete_sized",
                        "tc_deletearray_sized", "tc_delete_aligned", "tc_deletearray_aligned",
                        "tc_delete_sized_aligned", "tc_deletearray_sized_aligned",
                        "tc_delete_aligned_nothrow", "tc_deletearray_aligned_nothrow"})
    r.probes.push_back(release(s));
  return r;
}

// mimalloc's mi_* API. Argument orders differ from libc's: the size comes
// first in mi_malloc_aligned(size, align), mi_calloc/mi_mallocn(count, size)
// and mi_heap_*(heap, ...) take the heap first.
ProbeRole mimalloc_role() {
  ProbeRole r;
  r.name = "mimalloc";
  r.scope = RoleScope::kEveryObject;
  for (const char* s : {"mi_malloc", "mi_zalloc", "mi_malloc_small", "mi_zalloc_small",
                        "mi_malloc_aligned", "mi_malloc_aligned_at", "mi_zalloc_aligned",
                        "mi_zalloc_aligned_at", "mi_valloc", "mi_pvalloc", "mi_new",
                        "mi_new_nothrow", "mi_new_aligned", "mi_new_aligned_nothrow"})
    r.probes.push_back(ret(s, LW_FUNC_MALLOC));
  for (const char* s : {"mi_calloc", "mi_mallocn", "mi_calloc_aligned", "mi_calloc_aligned_at",
                        "mi_new_n"})
    r.probes.push_back(ret(s, LW_FUNC_CALLOC));
  for (const char* s : {"mi_realloc", "mi_rezalloc", "mi_realloc_aligned",
                        "mi_realloc_aligned_at", "mi_rezalloc_aligned", "mi_new_realloc"})
    r.probes.push_back(ret(s, LW_FUNC_REALLOC));
  for (const char* s : {"mi_reallocn", "mi_reallocarray", "mi_recalloc", "mi_new_reallocn"})
    r.probes.push_back(ret(s, LW_FUNC_REALLOCARRAY));
  r.probes.push_back(ret("mi_reallocf", LW_FUNC_REALLOCF));
  r.probes.push_back(ret("mi_expand", LW_FUNC_EXPAND));
  r.probes.push_back(ret("mi_posix_memalign", LW_FUNC_POSIX_MEMALIGN));
  r.probes.push_back(ret("mi_memalign", LW_FUNC_ALIGNED));
  r.probes.push_back(ret("mi_aligned_alloc", LW_FUNC_ALIGNED));
  for (const char* s : {"mi_heap_malloc", "mi_heap_zalloc", "mi_heap_malloc_small",
                        "mi_heap_malloc_aligned", "mi_heap_malloc_aligned_at"})
    r.probes.push_back(ret(s, LW_FUNC_HEAP_MALLOC));
  r.probes.push_back(ret("mi_heap_calloc", LW_FUNC_HEAP_CALLOC));
  r.probes.push_back(ret("mi_heap_mallocn", LW_FUNC_HEAP_CALLOC));
  r.probes.push_back(ret("mi_heap_realloc", LW_FUNC_HEAP_REALLOC));
  for (const char* s : {"mi_free", "mi_cfree", "mi_free_size", "mi_free_aligned",
                        "mi_free_size_aligned"})
    r.probes.push_back(release(s));
  return r;
}

}  // namespace

const std::vector<ProbeRole>& probe_roles() {
  static const std::vector<ProbeRole>* all = new std::vector<ProbeRole>{
      interposed_role(), jemalloc_role(), tcmalloc_role(), mimalloc_role()};
  return *all;
}

}  // namespace lw
