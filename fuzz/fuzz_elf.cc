// SPDX-License-Identifier: Apache-2.0
// Fuzzes the ELF reader the daemon runs on files from target processes:
// layout validation, symbol indexing, address translation, and the
// symbolizer behind it (libdw only ever sees files that passed validation),
// section reads and the unwind tables built from them.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/symbols/elf_file.h"
#include "core/symbols/symbolizer.h"
#include "core/unwind/unwind_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("lw_fuzz_elf", MFD_CLOEXEC);
  if (fd < 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) abort();
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto elf = lw::ElfFile::open_fd(fd, "fuzz.so");
  if (elf.ok()) {
    const lw::ElfFile& f = *elf.value();
    for (const char* name : {"malloc", "free", "_start", "main", ""}) {
      if (auto sym = f.find_function(name)) {
        std::vector<uint8_t> bytes = f.read_at_vaddr(sym->vaddr, 64);
        if (bytes.size() > 64) abort();
        if (auto off = f.vaddr_to_offset(sym->vaddr)) (void)f.offset_to_vaddr(*off);
      }
    }
    for (const lw::ElfSegment& s : f.segments()) {
      if (f.read_at_vaddr(s.vaddr, 4096).size() > 4096) abort();
      // Compressed sections (issue 32): what libdw may inflate stays
      // within the bound, and a file over it is refused, not inflated.
      lw::Symbolizer symbolizer(lw::SymbolizerLimits{.max_inflated_bytes = 1u << 20});
      (void)symbolizer.symbolize({"/fuzz.so", path, 0, ""}, s.offset + 1);
      const lw::SymbolizerStats st = symbolizer.stats();
      if (st.inflated_bytes > (1u << 20)) abort();
      const lw::ElfDebugLinks& links = f.debug_links();
      if (st.modules_opened > 0 && links.inflated_symbol_bytes > (1u << 20) && st.inflated_refused == 0) abort();
    }
    if (f.build_id().size() % 2 != 0) abort();
    // Section reads and the unwind-table compiler on whatever passed
    // validation (the file as its own debug file: .debug_frame when it has
    // no .eh_frame). fuzz_unwind fuzzes the CFI bytes directly.
    lw::UnwindBuildLimits limits;
    limits.max_section_bytes = 1 << 20;
    limits.max_steps = 1'000'000;
    limits.max_wall_ms = 0;
    auto table = lw::build_unwind_table(f, &f, limits);
    if (table.ok() && !lw::validate_table(*table).ok()) abort();
  } else if (elf.error().message.empty()) {
    abort();
  }
  close(fd);
  return 0;
}
