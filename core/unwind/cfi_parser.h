// SPDX-License-Identifier: Apache-2.0
// DWARF call-frame information (.eh_frame, .debug_frame) reduced to the
// rules the BPF unwinder evaluates (bpf/lw_unwind_abi.h): the CFA, where
// the caller's rbp is, and whether the return address is at CFA-8.
//
// Input is untrusted (objects come from traced processes): every read is
// bounds-checked, nothing recurses on input, and the work is bounded by
// UnwindBuildLimits. A limit exceeded, or a record whose length runs past
// the section (nothing after it can be framed), fails the whole parse with
// an Error saying which. A record that is wrong on its own (a CIE pointer
// to no CIE, an unknown opcode, a truncated instruction) is counted and
// parsing goes on: an FDE whose range is known but whose program is bad
// becomes one LW_CFA_UNSUPPORTED row over its range.
//
// Pure: no I/O, no globals. Thread-safety: parse_cfi may run on several
// threads at once on different (or the same, read-only) inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "lw_unwind_abi.h"
#include "core/platform/result.h"

namespace lw {

enum class CfiFormat : uint8_t {
  kEhFrame,     // .eh_frame: CIE id 0, CIE pointers relative, pointer encodings
  kDebugFrame,  // .debug_frame: CIE id all ones, CIE pointers absolute offsets
};

// Bounds on the work done for one object. Real objects are far below the
// defaults (bench/README.md, "Unwind tables": libtorch_cpu is the largest).
struct UnwindBuildLimits {
  uint64_t max_section_bytes = 256ull << 20;  // .eh_frame / .debug_frame read
  uint64_t max_fdes = 4u << 20;               // FDE records; CIE records too
  uint64_t max_rows = 16u << 20;              // rows produced, all FDEs together
  uint64_t max_program_bytes = 64u << 10;     // one FDE's CFA program with its CIE's
  uint32_t max_remember_depth = 32;           // DW_CFA_remember_state nesting
  uint64_t max_steps = 1ull << 30;            // records + CFA instructions decoded
  uint64_t max_wall_ms = 30'000;              // 0: no wall-clock bound
};

struct CfiSection {
  std::span<const uint8_t> bytes;
  uint64_t vaddr = 0;  // sh_addr: the base of DW_EH_PE_pcrel
  CfiFormat format = CfiFormat::kEhFrame;
  std::optional<uint64_t> text_vaddr;  // DW_EH_PE_textrel base (.text), if any
  std::optional<uint64_t> data_vaddr;  // DW_EH_PE_datarel base (.got), if any
};

// The reduced rules in force from `vaddr` on. rule.pc is not set here: the
// caller converts vaddrs to file offsets.
struct CfiRow {
  uint64_t vaddr = 0;
  lw_unwind_row rule{};
};

struct CfiFde {
  uint64_t record_offset = 0;  // in the section, for messages
  uint64_t pc_begin = 0;       // [pc_begin, pc_end), vaddrs, pc_begin < pc_end
  uint64_t pc_end = 0;
  bool malformed = false;      // program refused: rows is one UNSUPPORTED row
  // Sorted by vaddr, all in [pc_begin, pc_end), rows[0].vaddr == pc_begin,
  // no two consecutive rows with the same rule. Valid during the callback.
  std::span<const CfiRow> rows;
};

struct CfiStats {
  uint64_t cies = 0;
  uint64_t fdes = 0;               // FDE records seen
  uint64_t fdes_empty = 0;         // pc_range 0: no rows
  uint64_t fdes_malformed = 0;     // range known, program refused (UNSUPPORTED)
  uint64_t records_refused = 0;    // CIE or FDE with no usable range (skipped)
  uint64_t rows = 0;               // one per address where a program changes a rule
  uint64_t steps = 0;              // records + instructions decoded
  uint64_t max_program_bytes = 0;  // largest CIE + FDE program seen
  uint32_t max_remember_depth = 0; // deepest remember_state nesting seen
};

using CfiFdeVisitor = std::function<Status(const CfiFde&)>;

// Walks the section's records and runs every FDE's program, calling
// `on_fde` for each FDE with a non-empty range, in section order. An Error
// from `on_fde` stops the walk and is returned as is.
Status parse_cfi(const CfiSection& section, const UnwindBuildLimits& limits, CfiStats& stats,
                 const CfiFdeVisitor& on_fde);

}  // namespace lw
