// SPDX-License-Identifier: Apache-2.0
// An object's call-frame information compiled into the rows the BPF
// unwinder binary-searches (bpf/lw_unwind_abi.h): one row per file offset
// where the CFA rule, the rbp rule or the return-address rule changes,
// sorted by file offset, plus a page index that bounds every search to
// LW_UNWIND_MAX_SEARCH_STEPS steps.
//
// Pure (no libbpf): the ElfFile supplies the section bytes and PT_LOAD
// segments. Input is untrusted; see cfi_parser.h for how it is bounded.
// Thread-safety: the functions are reentrant; an UnwindTable is a plain
// value, immutable once built.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/unwind/cfi_parser.h"
#include "core/symbols/elf_file.h"
#include "core/platform/result.h"
#include "lw_unwind_abi.h"

namespace lw {

enum class CfiSource : uint8_t { kNone = 0, kEhFrame = 1, kDebugFrame = 2 };
const char* cfi_source_name(CfiSource source);  // ".eh_frame", ".debug_frame", "none"

inline constexpr size_t kLwCfaTypeCount = LW_CFA_UNSUPPORTED + 1;

struct UnwindTableStats {
  CfiSource source = CfiSource::kNone;
  CfiStats cfi;                     // what the parser saw (CIEs, FDEs, steps...)
  uint64_t fdes_outside_text = 0;   // FDE start in no executable PT_LOAD: dropped
  uint64_t fdes_overlapping = 0;    // cut short where the next FDE starts
  uint64_t rows_before_merge = 0;   // rows from the FDEs plus end-of-range NONE rows
  std::array<uint64_t, kLwCfaTypeCount> rows_by_cfa_type{};  // of `rows`
  double build_ms = 0;              // reading the section included
};

struct UnwindTable {
  std::vector<lw_unwind_row> rows;  // strictly increasing pc; the last row is NONE
  std::vector<uint32_t> pages;      // (rows.back().pc >> LW_UNWIND_PAGE_SHIFT) + 1 entries
  UnwindTableStats stats;

  size_t bytes() const {
    return rows.size() * sizeof(lw_unwind_row) + pages.size() * sizeof(uint32_t);
  }
};

// What a table is compiled from: the call-frame section (its bytes in
// `bytes`; `cfi.bytes` is left empty, so a copy never dangles), where it sits, and the object's PT_LOAD
// segments. A table is a function of these alone: cfi_identity() of two
// inputs is the same exactly when they compile to the same table, whatever
// else the files hold (decision file-identity).
struct CfiInput {
  std::vector<uint8_t> bytes;
  CfiSection cfi;
  std::vector<ElfSegment> segments;
  std::string source_path;  // the file the section came from, for messages
};

// Reads what build_unwind_table() compiles (same choice of section, same
// errors).
Result<CfiInput> read_cfi_input(const ElfFile& obj, const ElfFile* debug_file,
                                const UnwindBuildLimits& limits = {});
Result<UnwindTable> build_unwind_table(const CfiInput& input, const UnwindBuildLimits& limits = {});

// SHA-256 (64 lowercase hex digits) of everything in `input` that the
// table depends on: format, section address, relative bases, the segments
// and the section's bytes. Collision-resistant: another user's file cannot
// be made to share a victim's table unless it compiles to that table.
std::string cfi_identity(const CfiInput& input);

// Compiles `obj`'s .eh_frame; when it has none, the .debug_frame of
// `debug_file` (its separate debug file, found by build-id; may be null).
// Addresses become file offsets through `obj`'s executable PT_LOAD
// segments. ENOENT when neither section is there; EINVAL when both files
// have a build-id and they differ.
Result<UnwindTable> build_unwind_table(const ElfFile& obj, const ElfFile* debug_file,
                                       const UnwindBuildLimits& limits = {});

// The same from the section's bytes and the object's segments: what the
// fuzzer and the crafted-CFI tests drive.
Result<UnwindTable> build_unwind_table_from_cfi(const CfiSection& cfi,
                                                const std::vector<ElfSegment>& segments,
                                                const UnwindBuildLimits& limits = {});

// pages[p] = index of the last row with pc <= p << LW_UNWIND_PAGE_SHIFT (0 if none).
std::vector<uint32_t> build_page_index(const std::vector<lw_unwind_row>& rows);

// The row in effect at `file_offset` (the last row with pc <= it), found
// exactly as the BPF unwinder does: the page index, then at most
// LW_UNWIND_MAX_SEARCH_STEPS halvings. Null when no row starts at or before
// the offset, or when the table breaks the search bound (validate_table
// refuses such tables). `steps`, if given, receives the halvings made.
const lw_unwind_row* find_row(const UnwindTable& table, uint32_t file_offset,
                              unsigned* steps = nullptr);

// Checks what the BPF side relies on: rows strictly sorted, known types,
// offsets 0 where the type does not use them, the last row NONE, no two
// consecutive rows alike, and `pages` exactly build_page_index(rows) with
// every page's search range under 2^LW_UNWIND_MAX_SEARCH_STEPS rows.
Status validate_table(const UnwindTable& table);

}  // namespace lw
