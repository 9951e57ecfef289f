// SPDX-License-Identifier: Apache-2.0
#include "core/unwind/unwind_table.h"

#include <elf.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

namespace lw {

namespace {

// One FDE's rows once its range is in file offsets: [start, end), rows
// [first, first + count) of the scratch vector.
struct FdeSpan {
  uint32_t start;
  uint32_t end;
  uint32_t first;
  uint32_t count;
  uint32_t seq;  // section order, to keep sorting deterministic
};

bool same_rule(const lw_unwind_row& a, const lw_unwind_row& b) {
  return a.cfa_type == b.cfa_type && a.cfa_offset == b.cfa_offset && a.rbp_type == b.rbp_type &&
         a.rbp_offset == b.rbp_offset;
}

// The executable segment whose file-backed part holds `vaddr`. Code past
// p_filesz (in .bss) is not in the file and has no file offset.
const ElfSegment* text_segment_of(const std::vector<ElfSegment>& segments, uint64_t vaddr) {
  for (const ElfSegment& s : segments) {
    if (s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return &s;
  }
  return nullptr;
}

class RowMerger {
 public:
  explicit RowMerger(std::vector<lw_unwind_row>& out) : out_(out) {}
  uint64_t pushed() const { return pushed_; }

  // Rows arrive in non-decreasing pc order. A row at the pc of the last
  // one replaces it; a row with the last one's rules adds nothing.
  void push(const lw_unwind_row& row) {
    ++pushed_;
    if (!out_.empty() && out_.back().pc == row.pc) {
      out_.back() = row;
      if (out_.size() >= 2 && same_rule(out_[out_.size() - 2], out_.back())) out_.pop_back();
      return;
    }
    if (!out_.empty() && same_rule(out_.back(), row)) return;
    out_.push_back(row);
  }

 private:
  std::vector<lw_unwind_row>& out_;
  uint64_t pushed_ = 0;
};

Error table_error(const std::string& what) { return Error{EINVAL, "unwind table: " + what}; }

}  // namespace

const char* cfi_source_name(CfiSource source) {
  switch (source) {
    case CfiSource::kEhFrame: return ".eh_frame";
    case CfiSource::kDebugFrame: return ".debug_frame";
    case CfiSource::kNone: break;
  }
  return "none";
}

std::vector<uint32_t> build_page_index(const std::vector<lw_unwind_row>& rows) {
  std::vector<uint32_t> pages;
  if (rows.empty()) return pages;
  const uint64_t npages = (uint64_t{rows.back().pc} >> LW_UNWIND_PAGE_SHIFT) + 1;
  pages.resize(static_cast<size_t>(npages));
  size_t row = 0;
  for (uint64_t p = 0; p < npages; ++p) {
    const uint64_t page_start = p << LW_UNWIND_PAGE_SHIFT;
    while (row + 1 < rows.size() && rows[row + 1].pc <= page_start) ++row;
    pages[static_cast<size_t>(p)] = static_cast<uint32_t>(row);
  }
  return pages;
}

const lw_unwind_row* find_row(const UnwindTable& table, uint32_t file_offset, unsigned* steps) {
  if (steps != nullptr) *steps = 0;
  const std::vector<lw_unwind_row>& rows = table.rows;
  const std::vector<uint32_t>& pages = table.pages;
  if (rows.empty() || pages.empty()) return nullptr;
  const size_t nrows = rows.size();
  const size_t npages = pages.size();
  const size_t p = file_offset >> LW_UNWIND_PAGE_SHIFT;
  // Past the last page: the last row (always NONE) is in effect.
  if (p >= npages) return &rows[nrows - 1];
  size_t lo = pages[p];
  size_t hi = p + 1 < npages ? pages[p + 1] : nrows - 1;
  if (lo >= nrows || hi >= nrows || hi < lo) return nullptr;
  // The BPF loop: a fixed number of iterations, the verifier needs a bound.
  unsigned step = 0;
  for (; step < LW_UNWIND_MAX_SEARCH_STEPS && lo < hi; ++step) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (rows[mid].pc <= file_offset) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (steps != nullptr) *steps = step;
  if (lo < hi || rows[lo].pc > file_offset) return nullptr;
  return &rows[lo];
}

Status validate_table(const UnwindTable& table) {
  const std::vector<lw_unwind_row>& rows = table.rows;
  if (rows.size() > UINT32_MAX) return table_error("too many rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    const lw_unwind_row& r = rows[i];
    const char* wrong = nullptr;
    const bool evaluated = r.cfa_type == LW_CFA_RSP || r.cfa_type == LW_CFA_RBP ||
                           r.cfa_type == LW_CFA_PLT || r.cfa_type == LW_CFA_DEREF_RBP;
    if (r.cfa_type > LW_CFA_UNSUPPORTED) {
      wrong = "unknown CFA type";
    } else if (r.rbp_type > LW_RBP_UNSUPPORTED) {
      wrong = "unknown rbp type";
    } else if (!evaluated && (r.cfa_offset != 0 || r.rbp_type != LW_RBP_SAME)) {
      wrong = "offsets or rbp rule on a row that uses none";
    } else if (r.rbp_type != LW_RBP_AT_CFA && r.rbp_offset != 0) {
      wrong = "rbp offset without LW_RBP_AT_CFA";
    } else if (r.cfa_type == LW_CFA_PLT && (r.cfa_offset < 0 || r.cfa_offset > 15)) {
      wrong = "PLT threshold out of range";
    } else if (i > 0 && r.pc <= rows[i - 1].pc) {
      wrong = "pc not increasing";
    } else if (i > 0 && same_rule(r, rows[i - 1])) {
      wrong = "same rules as the row before";
    }
    if (wrong != nullptr) return table_error("row " + std::to_string(i) + ": " + wrong);
  }
  if (!rows.empty() && rows.back().cfa_type != LW_CFA_NONE) {
    return table_error("the last row is not LW_CFA_NONE");
  }
  const std::vector<uint32_t> expected = build_page_index(rows);
  if (table.pages != expected) return table_error("page index does not match the rows");
  for (size_t p = 0; p < expected.size(); ++p) {
    const uint64_t hi = p + 1 < expected.size() ? expected[p + 1] : rows.size() - 1;
    if (hi - expected[p] >= (uint64_t{1} << LW_UNWIND_MAX_SEARCH_STEPS)) {
      return table_error("page " + std::to_string(p) + " needs more than " +
                         std::to_string(LW_UNWIND_MAX_SEARCH_STEPS) + " search steps");
    }
  }
  return ok_status();
}

Result<UnwindTable> build_unwind_table_from_cfi(const CfiSection& cfi,
                                                const std::vector<ElfSegment>& segments,
                                                const UnwindBuildLimits& limits) {
  const auto started = std::chrono::steady_clock::now();
  UnwindTable table;
  table.stats.source = cfi.format == CfiFormat::kEhFrame ? CfiSource::kEhFrame
                                                         : CfiSource::kDebugFrame;
  std::vector<lw_unwind_row> scratch;
  std::vector<FdeSpan> spans;
  uint32_t seq = 0;

  Status parsed = parse_cfi(cfi, limits, table.stats.cfi, [&](const CfiFde& fde) -> Status {
    const ElfSegment* seg = text_segment_of(segments, fde.pc_begin);
    if (seg == nullptr) {
      ++table.stats.fdes_outside_text;
      return ok_status();
    }
    // Clipped to the segment, computed without overflow whatever the headers say.
    const uint64_t in_segment = fde.pc_begin - seg->vaddr;
    const uint64_t end_vaddr =
        fde.pc_begin + std::min(fde.pc_end - fde.pc_begin, seg->filesz - in_segment);
    const uint64_t start = seg->offset + in_segment;
    const uint64_t end = start + (end_vaddr - fde.pc_begin);
    // The end row needs a u32 pc too; ElfFile caps files at 4 GiB.
    if (start < seg->offset || end < start || end > UINT32_MAX) {
      ++table.stats.fdes_outside_text;
      return ok_status();
    }
    const size_t first = scratch.size();
    for (const CfiRow& row : fde.rows) {
      if (row.vaddr >= end_vaddr) break;
      lw_unwind_row r = row.rule;
      r.pc = static_cast<uint32_t>(start + (row.vaddr - fde.pc_begin));
      scratch.push_back(r);
    }
    // Rows plus one end row each must fit the limit (and u32 indices).
    if (scratch.size() + spans.size() + 1 > limits.max_rows) {
      return Error{E2BIG, "unwind rows over the limit of " + std::to_string(limits.max_rows)};
    }
    spans.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end),
                     static_cast<uint32_t>(first), static_cast<uint32_t>(scratch.size() - first),
                     seq++});
    return ok_status();
  });
  if (!parsed.ok()) return parsed.error();

  // .eh_frame is in link order, not address order, and several executable
  // segments need not map in file order either.
  std::sort(spans.begin(), spans.end(), [](const FdeSpan& a, const FdeSpan& b) {
    return a.start != b.start ? a.start < b.start : a.seq < b.seq;
  });
  table.rows.reserve(scratch.size() + spans.size());
  RowMerger merger(table.rows);
  lw_unwind_row none{};
  none.cfa_type = LW_CFA_NONE;
  for (size_t i = 0; i < spans.size(); ++i) {
    const FdeSpan& s = spans[i];
    const bool has_next = i + 1 < spans.size();
    // Overlapping FDEs (hostile, or a linker bug): the later start wins
    // from where it starts; the rest of the earlier range is lost.
    const uint32_t end = has_next ? std::min(s.end, spans[i + 1].start) : s.end;
    if (end < s.end) ++table.stats.fdes_overlapping;
    if (end <= s.start) continue;
    for (uint32_t k = 0; k < s.count; ++k) {
      const lw_unwind_row& r = scratch[s.first + k];
      if (r.pc >= end) break;
      merger.push(r);
    }
    if (!has_next || spans[i + 1].start != end) {
      none.pc = end;
      merger.push(none);
    }
  }
  table.stats.rows_before_merge = merger.pushed();
  for (const lw_unwind_row& r : table.rows) ++table.stats.rows_by_cfa_type[r.cfa_type];
  table.pages = build_page_index(table.rows);
  table.stats.build_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - started).count();
  return table;
}

Result<CfiInput> read_cfi_input(const ElfFile& obj, const ElfFile* debug_file,
                                const UnwindBuildLimits& limits) {
  const ElfFile* source = &obj;
  const char* name = ".eh_frame";
  CfiInput input;
  std::optional<ElfSection> section = obj.find_section(name);
  if (!section || section->type == SHT_NOBITS || section->size == 0) {
    section.reset();
    if (debug_file != nullptr) {
      // The caller finds the debug file by build-id; a mismatch means rows
      // describing another build's code, which is worse than none.
      if (!obj.build_id().empty() && !debug_file->build_id().empty() &&
          obj.build_id() != debug_file->build_id()) {
        return Error{EINVAL, debug_file->path() + ": build-id " + debug_file->build_id() +
                                 " is not the one of " + obj.path() + " (" + obj.build_id() + ")"};
      }
      name = ".debug_frame";
      source = debug_file;
      section = debug_file->find_section(name);
      if (section && (section->type == SHT_NOBITS || section->size == 0)) section.reset();
    }
    input.cfi.format = CfiFormat::kDebugFrame;
  }
  if (!section) {
    return Error{ENOENT, obj.path() + ": no call-frame information (no .eh_frame" +
                             std::string(debug_file != nullptr ? ", no .debug_frame in " +
                                                                     debug_file->path()
                                                               : "") +
                             ")"};
  }
  Result<ElfSectionData> data = source->read_section(name, limits.max_section_bytes);
  if (!data) return data.error();
  input.bytes = std::move(data->bytes);
  input.cfi.vaddr = data->vaddr;
  // Relative bases come from the object the pointers were linked for.
  if (std::optional<ElfSection> text = obj.find_section(".text")) input.cfi.text_vaddr = text->vaddr;
  if (std::optional<ElfSection> got = obj.find_section(".got")) input.cfi.data_vaddr = got->vaddr;
  input.segments = obj.segments();
  input.source_path = source->path();
  return input;
}

Result<UnwindTable> build_unwind_table(const CfiInput& input, const UnwindBuildLimits& limits) {
  const auto started = std::chrono::steady_clock::now();
  CfiSection cfi = input.cfi;
  cfi.bytes = input.bytes;
  Result<UnwindTable> table = build_unwind_table_from_cfi(cfi, input.segments, limits);
  if (!table) {
    Error e = table.error();
    e.message = input.source_path + ": " + e.message;
    return e;
  }
  table->stats.build_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - started).count();
  return table;
}

Result<UnwindTable> build_unwind_table(const ElfFile& obj, const ElfFile* debug_file,
                                       const UnwindBuildLimits& limits) {
  const auto started = std::chrono::steady_clock::now();
  Result<CfiInput> input = read_cfi_input(obj, debug_file, limits);
  if (!input) return input.error();
  Result<UnwindTable> table = build_unwind_table(*input, limits);
  // Reading the section included.
  if (table) {
    table->stats.build_ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - started).count();
  }
  return table;
}

}  // namespace lw
