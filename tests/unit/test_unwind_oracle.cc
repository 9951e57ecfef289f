// SPDX-License-Identifier: Apache-2.0
// The unwind tables against an independent oracle: binutils' readelf.
// `readelf --debug-dump=frames-interp` runs every CFA program and prints a
// row (LOC, CFA, one column per register, ra) wherever it changes; for each
// such row, find_row() at that address, converted to a file offset, must
// give the same CFA rule and rbp rule, and LW_CFA_RSP/RBP/PLT/DEREF_RBP only
// where the return address is at c-8. readelf prints "exp" for any CFA
// expression, so the expressions themselves are read from the raw dump
// (`--debug-dump=frames`) of the same FDE.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/unwind/unwind_table.h"

namespace lw {
namespace {

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

bool have_readelf() {
  return run_command("readelf --version 2>/dev/null").find("GNU") != std::string::npos;
}

struct ReadelfRow {
  uint64_t loc = 0;
  std::string cfa;
  std::string rbp;  // "" when readelf has no rbp column for the FDE
  std::string ra;   // "" when readelf has no ra column
};

struct ReadelfFde {
  uint64_t begin = 0, end = 0;
  bool signal = false;                       // its CIE's augmentation has 'S'
  std::vector<ReadelfRow> rows;              // the CIE's row when the FDE prints none
  std::set<std::string> cfa_expressions;     // from the raw dump
  bool rbp_set_undefined = false;            // DW_CFA_undefined r6 in the raw dump
};

const std::regex kRecordHeader(R"(^([0-9a-f]+) [0-9a-f]+ ([0-9a-f]+) (CIE|FDE) (.*)$)");
const std::regex kCieHeader(R"x(^"([^"]*)")x");
const std::regex kFdeHeader(R"(^cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))");

// std::regex is slow; most lines are rows or instructions.
bool is_record_header(const std::string& line) {
  return line.find(" FDE ") != std::string::npos || line.find(" CIE ") != std::string::npos;
}

// Both dumps, for the one section `section` (".eh_frame" / ".debug_frame").
std::map<uint64_t, ReadelfFde> read_frames(const std::string& path, const std::string& section) {
  std::map<uint64_t, ReadelfFde> fdes;  // by record offset
  std::map<uint64_t, std::string> cie_aug;
  std::map<uint64_t, ReadelfRow> cie_row;
  const std::string wanted = "Contents of the " + section + " section";
  {
    std::istringstream in(run_command("readelf -wF " + path + " 2>/dev/null"));
    std::string line;
    bool in_section = false;
    std::vector<std::string> columns;
    ReadelfFde* fde = nullptr;
    uint64_t cie = 0;
    bool in_cie = false;
    while (std::getline(in, line)) {
      if (line.rfind("Contents of the ", 0) == 0) in_section = line.rfind(wanted, 0) == 0;
      if (!in_section) continue;
      std::smatch m;
      if (is_record_header(line) && std::regex_match(line, m, kRecordHeader)) {
        const uint64_t offset = std::stoull(m[1], nullptr, 16);
        const std::string rest = m[4];
        std::smatch h;
        fde = nullptr;
        in_cie = m[3] == "CIE";
        if (in_cie && std::regex_search(rest, h, kCieHeader)) {
          cie = offset;
          cie_aug[offset] = h[1];
        } else if (!in_cie && std::regex_search(rest, h, kFdeHeader)) {
          fde = &fdes[offset];
          fde->begin = std::stoull(h[2], nullptr, 16);
          fde->end = std::stoull(h[3], nullptr, 16);
          const uint64_t its_cie = std::stoull(h[1], nullptr, 16);
          fde->signal = cie_aug[its_cie].find('S') != std::string::npos;
          if (cie_row.count(its_cie) != 0) {
            ReadelfRow initial = cie_row[its_cie];
            initial.loc = fde->begin;
            fde->rows.push_back(initial);  // replaced if the FDE prints rows
          }
        }
        continue;
      }
      // Columns are whitespace-separated, but a register rule prints as
      // "r5 (rdi)": a "(name)" token belongs to the one before it.
      std::istringstream fields(line);
      std::vector<std::string> tok;
      for (std::string t; fields >> t;) {
        if (t[0] == '(' && !tok.empty()) tok.back() += " " + t;
        else tok.push_back(t);
      }
      if (tok.size() >= 2 && tok[0] == "LOC") {
        columns = tok;
        if (fde != nullptr) fde->rows.clear();
        continue;
      }
      if (tok.size() < 2 || tok[0].size() < 8 || tok.size() != columns.size()) continue;
      ReadelfRow row;
      row.loc = std::stoull(tok[0], nullptr, 16);
      row.cfa = tok[1];
      for (size_t i = 2; i < tok.size(); ++i) {
        if (columns[i] == "rbp") row.rbp = tok[i];
        if (columns[i] == "ra") row.ra = tok[i];
      }
      if (fde != nullptr) fde->rows.push_back(row);
      else if (in_cie && cie_row.count(cie) == 0) cie_row[cie] = row;
    }
  }
  {
    std::istringstream in(run_command("readelf -wf " + path + " 2>/dev/null"));
    std::string line;
    bool in_section = false;
    ReadelfFde* fde = nullptr;
    const std::string expr = "DW_CFA_def_cfa_expression (";
    while (std::getline(in, line)) {
      if (line.rfind("Contents of the ", 0) == 0) in_section = line.rfind(wanted, 0) == 0;
      if (!in_section) continue;
      std::smatch m;
      if (is_record_header(line) && std::regex_match(line, m, kRecordHeader)) {
        auto it = fdes.find(std::stoull(m[1], nullptr, 16));
        fde = m[3] == "FDE" && it != fdes.end() ? &it->second : nullptr;
        continue;
      }
      if (fde == nullptr) continue;
      if (size_t at = line.find(expr); at != std::string::npos) {
        const size_t start = at + expr.size();
        fde->cfa_expressions.insert(line.substr(start, line.rfind(')') - start));
      }
      if (line.find("DW_CFA_undefined: r6 (rbp)") != std::string::npos)
        fde->rbp_set_undefined = true;
    }
  }
  return fdes;
}

const std::regex kPltText(
    R"(^DW_OP_breg7 \(rsp\): 8; DW_OP_breg16 \(rip\): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit(\d+); DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus$)");
const std::regex kDerefRbpText(R"(^DW_OP_breg6 \(rbp\): (-?\d+); DW_OP_deref$)");
const std::regex kRegOffset(R"(^(\w+)([+-]\d+)$)");
const std::regex kSavedAt(R"(^c([+-]\d+)$)");

lw_unwind_row typed(uint8_t type, int32_t cfa_offset = 0) {
  return lw_unwind_row{0, cfa_offset, 0, type, LW_RBP_SAME};
}

// The rows we accept for one readelf row: usually one; several where the
// dump cannot tell (an FDE with different CFA expressions; "u" for rbp).
std::vector<lw_unwind_row> expected_rows(const ReadelfFde& fde, const ReadelfRow& r) {
  if (fde.signal) return {typed(LW_CFA_SIGNAL)};
  if (r.ra == "u") return {typed(LW_CFA_END)};
  if (r.ra != "c-8") return {typed(LW_CFA_UNSUPPORTED)};
  std::vector<lw_unwind_row> cfas;
  std::smatch m;
  if (r.cfa == "exp") {
    for (const std::string& e : fde.cfa_expressions) {
      if (std::regex_match(e, m, kPltText)) {
        cfas.push_back(typed(LW_CFA_PLT, std::stoi(m[1])));
      } else if (std::regex_match(e, m, kDerefRbpText)) {
        cfas.push_back(typed(LW_CFA_DEREF_RBP, std::stoi(m[1])));
      } else {
        cfas.push_back(typed(LW_CFA_UNSUPPORTED));
      }
    }
  } else if (std::regex_match(r.cfa, m, kRegOffset) && (m[1] == "rsp" || m[1] == "rbp")) {
    const long long v = std::stoll(m[2]);
    cfas.push_back(v < INT32_MIN || v > INT32_MAX
                       ? typed(LW_CFA_UNSUPPORTED)
                       : typed(m[1] == "rsp" ? LW_CFA_RSP : LW_CFA_RBP, static_cast<int32_t>(v)));
  } else {
    cfas.push_back(typed(LW_CFA_UNSUPPORTED));
  }
  std::vector<lw_unwind_row> out;
  for (lw_unwind_row row : cfas) {
    if (row.cfa_type == LW_CFA_UNSUPPORTED) {
      out.push_back(row);
      continue;
    }
    // readelf prints "u" both for undefined and for "no rule yet" (it marks
    // every column the FDE mentions anywhere); the latter is "same value".
    if (r.rbp.empty() || r.rbp == "s" || r.rbp == "u") {
      out.push_back(row);
      if (r.rbp == "u" && fde.rbp_set_undefined) {
        row.rbp_type = LW_RBP_UNDEFINED;
        out.push_back(row);
      }
    } else if (std::regex_match(r.rbp, m, kSavedAt) && std::stoi(m[1]) >= INT16_MIN &&
               std::stoi(m[1]) <= INT16_MAX) {
      row.rbp_type = LW_RBP_AT_CFA;
      row.rbp_offset = static_cast<int16_t>(std::stoi(m[1]));
      out.push_back(row);
    } else {
      row.rbp_type = LW_RBP_UNSUPPORTED;
      out.push_back(row);
    }
  }
  return out;
}

bool same(const lw_unwind_row& a, const lw_unwind_row& b) {
  return a.cfa_type == b.cfa_type && a.cfa_offset == b.cfa_offset && a.rbp_type == b.rbp_type &&
         a.rbp_offset == b.rbp_offset;
}

std::string show(const lw_unwind_row* r) {
  if (r == nullptr) return "(no row)";
  std::ostringstream s;
  s << "type " << int(r->cfa_type) << " cfa_off " << r->cfa_offset << " rbp " << int(r->rbp_type)
    << "@" << r->rbp_offset;
  return s.str();
}

struct OracleReport {
  uint64_t rows_compared = 0, addresses_compared = 0, mismatches = 0;
  uint64_t fdes = 0, fdes_overlapping = 0, rows_past_end = 0, ends_checked = 0;
  std::map<int, uint64_t> by_type;
  std::vector<std::string> first_mismatches;
};

// Checks `table` (built from `obj`) against readelf's view of `cfi_path`.
OracleReport compare_with_readelf(const ElfFile& obj, const UnwindTable& table,
                                  const std::string& cfi_path, const std::string& section) {
  OracleReport rep;
  const std::map<uint64_t, ReadelfFde> fdes = read_frames(cfi_path, section);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [_, f] : fdes) {
    if (f.begin < f.end) ranges.emplace_back(f.begin, f.end);
  }
  std::sort(ranges.begin(), ranges.end());
  std::set<uint64_t> starts;
  for (const auto& r : ranges) starts.insert(r.first);
  auto overlaps = [&](uint64_t b, uint64_t e) {
    auto it = std::lower_bound(ranges.begin(), ranges.end(), std::make_pair(b, e));
    const bool prev = it != ranges.begin() && (it - 1)->second > b;
    const bool next = it + 1 != ranges.end() && (it + 1)->first < e;
    const bool twin = it + 1 != ranges.end() && (it + 1)->first == b;
    return prev || next || twin;
  };
  auto text_offset = [&](uint64_t vaddr) -> std::optional<uint32_t> {
    for (const ElfSegment& s : obj.segments()) {
      if (s.executable && vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) {
        return static_cast<uint32_t>(s.offset + vaddr - s.vaddr);
      }
    }
    return std::nullopt;
  };
  auto check = [&](uint64_t vaddr, const std::vector<lw_unwind_row>& want, const char* what) {
    const std::optional<uint32_t> o = text_offset(vaddr);
    if (!o) return;
    ++rep.addresses_compared;
    const lw_unwind_row* got = find_row(table, *o);
    for (const lw_unwind_row& w : want) {
      if (got != nullptr && same(*got, w)) {
        ++rep.by_type[w.cfa_type];
        return;
      }
    }
    ++rep.mismatches;
    if (rep.first_mismatches.size() < 20) {
      std::ostringstream s;
      s << what << " 0x" << std::hex << vaddr << std::dec << ": got " << show(got)
        << ", readelf says " << show(&want[0]) << (want.size() > 1 ? " (or others)" : "");
      rep.first_mismatches.push_back(s.str());
    }
  };
  for (const auto& [offset, f] : fdes) {
    if (f.begin >= f.end) continue;
    ++rep.fdes;
    if (overlaps(f.begin, f.end)) {
      ++rep.fdes_overlapping;
      continue;
    }
    for (size_t i = 0; i < f.rows.size(); ++i) {
      const ReadelfRow& r = f.rows[i];
      if (r.loc < f.begin || r.loc >= f.end) {
        ++rep.rows_past_end;
        continue;
      }
      ++rep.rows_compared;
      const std::vector<lw_unwind_row> want = expected_rows(f, r);
      // The row's first and last address: no rule may change in between.
      const uint64_t last =
          (i + 1 < f.rows.size() ? std::min(f.rows[i + 1].loc, f.end) : f.end) - 1;
      check(r.loc, want, "row at");
      if (last != r.loc) check(last, want, "row end at");
    }
    if (starts.count(f.end) == 0) {
      ++rep.ends_checked;
      check(f.end, {typed(LW_CFA_NONE)}, "FDE end at");
    }
  }
  return rep;
}

void expect_sound(const UnwindTable& t, const std::string& what) {
  Status valid = validate_table(t);
  EXPECT_TRUE(valid.ok()) << what << ": " << (valid.ok() ? "" : valid.error().message);
  // What LW_UNWIND_MAX_SEARCH_STEPS promises the BPF side.
  for (size_t p = 0; p < t.pages.size(); ++p) {
    const size_t hi = p + 1 < t.pages.size() ? t.pages[p + 1] : t.rows.size() - 1;
    ASSERT_LT(hi - t.pages[p], size_t{1} << LW_UNWIND_MAX_SEARCH_STEPS) << what << " page " << p;
  }
}

void print(const std::string& what, const UnwindTable& t, const OracleReport& r) {
  printf(
      "[ oracle ] %s: %lu FDEs, %lu readelf rows compared at %lu addresses (+%lu FDE ends), "
      "%lu mismatches; skipped: %lu overlapping FDEs, %lu rows past their FDE's end; table %zu "
      "rows;",
      what.c_str(), (unsigned long)r.fdes, (unsigned long)r.rows_compared,
      (unsigned long)r.addresses_compared, (unsigned long)r.ends_checked,
      (unsigned long)r.mismatches, (unsigned long)r.fdes_overlapping,
      (unsigned long)r.rows_past_end, t.rows.size());
  for (const auto& [type, n] : r.by_type) printf(" type%d=%lu", type, (unsigned long)n);
  printf("\n");
  for (const std::string& m : r.first_mismatches) printf("  %s\n", m.c_str());
}

void check_object(const std::string& path, uint64_t min_rows) {
  if (!have_readelf())
    GTEST_SKIP() << "readelf not found: install binutils (scripts/install-deps.sh)";
  auto obj = ElfFile::open_path(path);
  if (!obj) GTEST_SKIP() << path << " not present: " << obj.error().message;
  auto table = build_unwind_table(**obj, nullptr);
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->stats.source, CfiSource::kEhFrame);
  expect_sound(*table, path);
  const OracleReport r = compare_with_readelf(**obj, *table, path, ".eh_frame");
  print(path, *table, r);
  EXPECT_GE(r.rows_compared, min_rows);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(table->stats.cfi.fdes_malformed, 0u);
  EXPECT_EQ(table->stats.cfi.records_refused, 0u);
}

TEST(UnwindOracle, Libc) { check_object("/lib/x86_64-linux-gnu/libc.so.6", 20000); }
TEST(UnwindOracle, Libstdcxx) { check_object("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", 20000); }
TEST(UnwindOracle, Python311) { check_object("/usr/bin/python3.11", 40000); }
TEST(UnwindOracle, O2TestTarget) { check_object(std::string(LW_TARGETS_DIR) + "/unwind_o2", 50); }

// More objects, by hand: LW_UNWIND_ORACLE_OBJECTS=/path/a.so:/path/b.so
// (bench/README.md, "Unwind tables", ran it on libtorch_cpu).
TEST(UnwindOracle, ObjectsFromEnvironment) {
  const char* list = getenv("LW_UNWIND_ORACLE_OBJECTS");
  if (list == nullptr || *list == 0) GTEST_SKIP() << "LW_UNWIND_ORACLE_OBJECTS not set";
  std::istringstream paths(list);
  for (std::string path; std::getline(paths, path, ':');) {
    SCOPED_TRACE(path);
    check_object(path, 1);
  }
}

// The shapes each object must contain, so the comparisons above did cover them.
TEST(UnwindOracle, RealObjectsHaveEveryShape) {
  auto libc = ElfFile::open_path("/lib/x86_64-linux-gnu/libc.so.6");
  auto o2 = ElfFile::open_path(std::string(LW_TARGETS_DIR) + "/unwind_o2");
  ASSERT_TRUE(libc.ok() && o2.ok());
  auto t_libc = build_unwind_table(**libc, nullptr);
  auto t_o2 = build_unwind_table(**o2, nullptr);
  ASSERT_TRUE(t_libc.ok() && t_o2.ok());
  // glibc's __restore_rt (CIE "zRS") and clone/thread start (ra undefined).
  EXPECT_GE(t_libc->stats.rows_by_cfa_type[LW_CFA_SIGNAL], 1u);
  EXPECT_GE(t_libc->stats.rows_by_cfa_type[LW_CFA_END], 1u);
  EXPECT_GE(t_libc->stats.rows_by_cfa_type[LW_CFA_PLT], 1u);
  // vla_sum (rbp frame), realigned (DRAP), .plt, _start.
  for (int type : {LW_CFA_RSP, LW_CFA_RBP, LW_CFA_PLT, LW_CFA_DEREF_RBP, LW_CFA_END, LW_CFA_NONE}) {
    EXPECT_GE(t_o2->stats.rows_by_cfa_type[type], 1u) << "cfa type " << type;
  }
}

// A distribution's split: the object has no .eh_frame, its debug file (zlib-
// compressed sections, as -dbgsym packages ship them) has .debug_frame.
TEST(UnwindOracle, DebugFrameFromSeparateDebugFile) {
  if (!have_readelf())
    GTEST_SKIP() << "readelf not found: install binutils (scripts/install-deps.sh)";
  const std::string dir = LW_TARGETS_DIR;
  auto obj = ElfFile::open_path(dir + "/unwind_debug_frame.stripped");
  auto debug = ElfFile::open_path(dir + "/unwind_debug_frame.debug");
  ASSERT_TRUE(obj.ok()) << obj.error().message;
  ASSERT_TRUE(debug.ok()) << debug.error().message;
  ASSERT_TRUE((*debug)->find_section(".debug_frame").has_value());

  auto none = build_unwind_table(**obj, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ENOENT);

  auto table = build_unwind_table(**obj, debug->get());
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->stats.source, CfiSource::kDebugFrame);
  expect_sound(*table, "unwind_debug_frame");
  const OracleReport r = compare_with_readelf(**obj, *table, dir + "/unwind_debug_frame.debug",
                                              ".debug_frame");
  print("unwind_debug_frame (.debug_frame)", *table, r);
  EXPECT_GE(r.rows_compared, 10u);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_GE(table->stats.rows_by_cfa_type[LW_CFA_RBP], 1u);  // vla()

  // A debug file of another build is refused, not used.
  auto other = ElfFile::open_path(dir + "/unwind_o2");
  ASSERT_TRUE(other.ok());
  ASSERT_FALSE((*obj)->build_id().empty());
  auto mismatched = build_unwind_table(**obj, other->get());
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.error().message.find("build-id"), std::string::npos);

  // The unsplit binary still has the crt files' .eh_frame: that one wins.
  auto unsplit = ElfFile::open_path(dir + "/unwind_debug_frame");
  ASSERT_TRUE(unsplit.ok());
  auto from_eh = build_unwind_table(**unsplit, debug->get());
  ASSERT_TRUE(from_eh.ok()) << from_eh.error().message;
  EXPECT_EQ(from_eh->stats.source, CfiSource::kEhFrame);
}

}  // namespace
}  // namespace lw
