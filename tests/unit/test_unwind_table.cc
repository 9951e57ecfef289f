// SPDX-License-Identifier: Apache-2.0
// Crafted CFI: each LW_CFA_* / LW_RBP_* type, gaps between FDEs, merging,
// and the page index the BPF search relies on. The blobs are assembled by
// hand (cfi_test_builder.h); the real-compiler side is test_unwind_oracle.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/unwind/unwind_table.h"
#include "tests/unit/cfi_test_builder.h"

namespace lw {
namespace {

using namespace cfi_test;

UnwindTable build(const CfiBuilder& b, const UnwindBuildLimits& limits = {}) {
  auto table = build_unwind_table_from_cfi(b.section(), test_segments(), limits);
  EXPECT_TRUE(table.ok()) << (table.ok() ? "" : table.error().message);
  if (!table.ok()) return {};
  Status valid = validate_table(*table);
  EXPECT_TRUE(valid.ok()) << (valid.ok() ? "" : valid.error().message);
  return std::move(*table);
}

lw_unwind_row row_at(const UnwindTable& t, uint64_t vaddr) {
  const lw_unwind_row* r = find_row(t, off(vaddr));
  if (r == nullptr) return lw_unwind_row{0, 0, 0, 0xff, 0xff};  // "no row"
  return *r;
}

// A compact picture of a row for failure messages: "RSP+16 rbp@-16".
std::string describe(const lw_unwind_row& r) {
  static const char* kCfa[] = {"NONE", "RSP", "RBP", "PLT", "DEREF_RBP", "SIGNAL", "END", "UNSUP"};
  static const char* kRbp[] = {"same", "at", "undef", "unsup"};
  if (r.cfa_type > 7) return "no row";
  std::string s = std::string(kCfa[r.cfa_type]) + (r.cfa_offset >= 0 ? "+" : "") +
                  std::to_string(r.cfa_offset);
  s += std::string(" rbp:") + (r.rbp_type < 4 ? kRbp[r.rbp_type] : "?") +
       std::to_string(r.rbp_offset);
  return s;
}

std::string rsp(int32_t o) { return describe({0, o, 0, LW_CFA_RSP, LW_RBP_SAME}); }
std::string rbp_cfa(int32_t o, int16_t saved) {
  return describe({0, o, saved, LW_CFA_RBP, LW_RBP_AT_CFA});
}
std::string only(uint8_t type) { return describe({0, 0, 0, type, LW_RBP_SAME}); }

TEST(UnwindTable, RspRowsAreKeyedByFileOffsetAndEndWithNone) {
  CfiBuilder b;
  const size_t cie = b.cie();
  // push %rbx; sub $16,%rsp; ...; add; pop; ret
  b.fde(cie, 0x401100, 0x20,
        cat({advance(1), def_cfa_offset(16), advance(4), def_cfa_offset(32), advance(20),
             def_cfa_offset(16), advance(1), def_cfa_offset(8)}));
  const UnwindTable t = build(b);
  ASSERT_EQ(t.rows.size(), 6u);
  EXPECT_EQ(t.rows[0].pc, off(0x401100));
  EXPECT_EQ(t.rows[0].pc, 0x1100u);
  EXPECT_EQ(describe(row_at(t, 0x401100)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401101)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401104)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401105)), rsp(32));
  EXPECT_EQ(describe(row_at(t, 0x401119)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x40111a)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x40111f)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401120)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x4010ff)), "no row");
  EXPECT_EQ(t.stats.cfi.cies, 1u);
  EXPECT_EQ(t.stats.cfi.fdes, 1u);
  EXPECT_EQ(t.stats.source, CfiSource::kEhFrame);
}

TEST(UnwindTable, RbpFrameWithSavedRbp) {
  CfiBuilder b;
  const size_t cie = b.cie();
  // push %rbp; mov %rsp,%rbp; ...; leave; ret
  b.fde(cie, 0x401000, 0x40,
        cat({advance(1), def_cfa_offset(16), offset(kRbp, 2), advance(3), def_cfa_register(kRbp),
             advance(50), def_cfa(kRsp, 8), restore(kRbp)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401001)), describe({0, 16, -16, LW_CFA_RSP, LW_RBP_AT_CFA}));
  EXPECT_EQ(describe(row_at(t, 0x401004)), rbp_cfa(16, -16));
  EXPECT_EQ(describe(row_at(t, 0x401035)), rbp_cfa(16, -16));
  EXPECT_EQ(describe(row_at(t, 0x401036)), rsp(8));  // restore: the CIE's rule (none)
}

TEST(UnwindTable, PltExpression) {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x401000, 0x100,
        cat({def_cfa_offset(16), advance(6), def_cfa_offset(24), advance(10),
             def_cfa_expression(plt_expression(11))}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401006)), rsp(24));
  EXPECT_EQ(describe(row_at(t, 0x401010)), describe({0, 11, 0, LW_CFA_PLT, LW_RBP_SAME}));
  EXPECT_EQ(describe(row_at(t, 0x4010ff)), describe({0, 11, 0, LW_CFA_PLT, LW_RBP_SAME}));
  EXPECT_EQ(t.stats.rows_by_cfa_type[LW_CFA_PLT], 1u);
}

TEST(UnwindTable, OtherExpressionsAreUnsupported) {
  Bytes not_plt = plt_expression(11);
  not_plt[4] = 0x3e;  // DW_OP_lit14 instead of lit15: 8-byte entries, not what BPF assumes
  Bytes deref_then_more =
      cat({deref_rbp_expression(-8), {0x23, 0x08}});  // ...; DW_OP_plus_uconst 8
  for (const Bytes& e :
       {not_plt, plt_expression(18), deref_then_more, Bytes{0x77, 0x08}, Bytes{}}) {
    CfiBuilder b;
    b.fde(b.cie(), 0x401000, 0x10, def_cfa_expression(e));
    const UnwindTable t = build(b);
    EXPECT_EQ(describe(row_at(t, 0x401000)), only(LW_CFA_UNSUPPORTED));
  }
}

TEST(UnwindTable, DerefRbpForRealignedStack) {
  CfiBuilder b;
  const size_t cie = b.cie();
  // lea 8(%rsp),%r10; and $-64,%rsp; push -8(%r10); push %rbp; mov %rsp,%rbp; push %r10
  b.fde(cie, 0x401000, 0x60,
        cat({advance(5), def_cfa(kR10, 0), advance(9), expression(kRbp, {0x76, 0x00}), advance(4),
             def_cfa_expression(deref_rbp_expression(-8)), advance(40), def_cfa(kR10, 0),
             advance(4), def_cfa(kRsp, 8)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401005)), only(LW_CFA_UNSUPPORTED));  // CFA = r10
  // rbp's own rule is an expression (DW_OP_breg6 0): unknown in the caller.
  EXPECT_EQ(describe(row_at(t, 0x401012)),
            describe({0, -8, 0, LW_CFA_DEREF_RBP, LW_RBP_UNSUPPORTED}));
  EXPECT_EQ(describe(row_at(t, 0x40103a)), only(LW_CFA_UNSUPPORTED));
  EXPECT_EQ(describe(row_at(t, 0x40103e)), describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNSUPPORTED}));
}

TEST(UnwindTable, SignalFrameCie) {
  CfiBuilder b;
  const size_t normal = b.cie();
  // glibc's __restore_rt: CFA = *(rsp + 160), every register an expression.
  const Bytes regs = cat({expression(kRbp, {0x77, 0x78}), expression(kRa, {0x77, 0xa8, 0x01})});
  const size_t signal = b.cie("zRS", Bytes{});
  b.fde(signal, 0x40104f, 0xa, cat({def_cfa_expression({0x77, 0xa0, 0x01, 0x06}), regs}));
  b.fde(normal, 0x401060, 0x10, {});
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x40104f)), only(LW_CFA_SIGNAL));
  EXPECT_EQ(describe(row_at(t, 0x401058)), only(LW_CFA_SIGNAL));
  EXPECT_EQ(describe(row_at(t, 0x401059)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x401060)), rsp(8));
  EXPECT_EQ(t.stats.rows_by_cfa_type[LW_CFA_SIGNAL], 1u);
}

TEST(UnwindTable, UndefinedReturnAddressEndsTheStack) {
  CfiBuilder b;
  // _start: `cfi_undefined (rip)` right at the entry.
  b.fde(b.cie(), 0x401000, 0x30, cat({undefined(kRa), advance(4), def_cfa_offset(16)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401000)), only(LW_CFA_END));
  EXPECT_EQ(describe(row_at(t, 0x401010)), only(LW_CFA_END));  // CFA change: still END, merged
  EXPECT_EQ(t.rows.size(), 2u);
}

TEST(UnwindTable, RulesWeDoNotEvaluate) {
  struct Case {
    const char* what;
    Bytes program;
    std::string expected;
  };
  const Case cases[] = {
      {"CFA on r10", def_cfa(kR10, 0), only(LW_CFA_UNSUPPORTED)},
      {"ra at CFA-16", offset(kRa, 2), only(LW_CFA_UNSUPPORTED)},
      {"ra same value", same_value(kRa), only(LW_CFA_UNSUPPORTED)},
      {"ra in a register", reg_in_reg(kRa, 3), only(LW_CFA_UNSUPPORTED)},
      {"ra val_offset", val_offset(kRa, 1), only(LW_CFA_UNSUPPORTED)},
      {"CFA offset over s32", def_cfa_offset(1ull << 31), only(LW_CFA_UNSUPPORTED)},
      {"CFA offset at INT32_MIN", def_cfa_sf(kRsp, 0x10000000),
       describe({0, INT32_MIN, 0, LW_CFA_RSP, LW_RBP_SAME})},
      {"CFA offset under s32", def_cfa_sf(kRsp, 0x10000001), only(LW_CFA_UNSUPPORTED)},
      {"rbp same value", same_value(kRbp), rsp(8)},
      {"rbp undefined", undefined(kRbp), describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNDEFINED})},
      {"rbp in a register", reg_in_reg(kRbp, 3),
       describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNSUPPORTED})},
      {"rbp val_offset", val_offset(kRbp, 2), describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNSUPPORTED})},
      {"rbp val_expression", val_expression(kRbp, {0x76, 0x00}),
       describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNSUPPORTED})},
      {"rbp offset over s16", offset(kRbp, 5000),
       describe({0, 8, 0, LW_CFA_RSP, LW_RBP_UNSUPPORTED})},
      {"rbp offset_sf", offset_sf(kRbp, 3), describe({0, 8, -24, LW_CFA_RSP, LW_RBP_AT_CFA})},
  };
  for (const Case& c : cases) {
    CfiBuilder b;
    b.fde(b.cie(), 0x401000, 0x10, c.program);
    const UnwindTable t = build(b);
    EXPECT_EQ(describe(row_at(t, 0x401000)), c.expected) << c.what;
  }
}

TEST(UnwindTable, RememberAndRestoreStateIncludeTheCfa) {
  CfiBuilder b;
  // GCC's early return in the middle of a function:
  //   .cfi_remember_state; .cfi_def_cfa_offset 8; ret; .cfi_restore_state
  b.fde(b.cie(), 0x401000, 0x40,
        cat({advance(1), def_cfa_offset(16), offset(kRbp, 2), advance(9), remember_state(),
             def_cfa_offset(8), restore(kRbp), advance(1), restore_state(), advance(10),
             def_cfa_offset(8), restore(kRbp)}));
  const UnwindTable t = build(b);
  const std::string saved = describe({0, 16, -16, LW_CFA_RSP, LW_RBP_AT_CFA});
  EXPECT_EQ(describe(row_at(t, 0x401001)), saved);
  EXPECT_EQ(describe(row_at(t, 0x40100a)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x40100b)), saved);
  EXPECT_EQ(describe(row_at(t, 0x401015)), rsp(8));
  EXPECT_EQ(t.stats.cfi.max_remember_depth, 1u);
}

TEST(UnwindTable, EveryAdvanceFormAndFactors) {
  CfiBuilder b;
  // code_align 4, data_align -4: advances and offsets are scaled.
  const size_t cie = b.cie("zR", cat({def_cfa(kRsp, 8), offset(kRa, 2)}), kPcrelSdata4, -4, 4);
  b.fde(cie, 0x401000, 0x1000,
        cat({nop(), advance(1), def_cfa_offset_sf(-4), advance1(2), def_cfa_offset(32),
             advance2(3), args_size(16), offset_sf(kRbp, 4), advance4(4), def_cfa_sf(kRbp, -4)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401004)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x40100c)), rsp(32));
  EXPECT_EQ(describe(row_at(t, 0x401018)), describe({0, 32, -16, LW_CFA_RSP, LW_RBP_AT_CFA}));
  EXPECT_EQ(describe(row_at(t, 0x401028)), describe({0, 16, -16, LW_CFA_RBP, LW_RBP_AT_CFA}));
}

TEST(UnwindTable, SetLocAndAbsoluteEncoding) {
  CfiBuilder b;
  const size_t cie = b.cie("zR", standard_initial(), kUdata8);
  b.fde(cie, 0x401000, 0x100,
        cat({Bytes{0x01}, le(0x401020, 8), def_cfa_offset(16), Bytes{0x01}, le(0x401080, 8),
             def_cfa_offset(8)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x40101f)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401020)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401080)), rsp(8));
}

TEST(UnwindTable, SetLocPcRelative) {
  // With the CIE's usual pcrel|sdata4, set_loc's operand is relative to its
  // own address in the section.
  CfiBuilder b;
  const size_t cie = b.cie();
  const size_t fde_at = b.bytes().size();
  // Record: length 4, CIE pointer 4, pc_begin 4, pc_range 4, aug length 1,
  // then DW_CFA_set_loc (1 byte) and its operand.
  const uint64_t operand_vaddr = 0x500000 + fde_at + 4 + 4 + 4 + 4 + 1 + 1;
  b.fde(cie, 0x401000, 0x100,
        cat({Bytes{0x01}, le(0x401040 - operand_vaddr, 4), def_cfa_offset(16)}));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x40103f)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401040)), rsp(16));
}

TEST(UnwindTable, AugmentationsPersonalityAndLsdaAreSkipped) {
  CfiBuilder b;
  const size_t cie = b.cie("zPLR");
  Bytes fde_aug = cat({Bytes{4}, le(0, 4)});  // the LSDA pointer, in the FDE's augmentation data
  b.fde(cie, 0x401000, 0x10, cat({fde_aug, advance(1), def_cfa_offset(16)}), false);
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x401001)), rsp(16));
}

TEST(UnwindTable, GapsBetweenFdesAndUnsortedSection) {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x402000, 0x10, def_cfa_offset(16));  // after the others in the section
  b.fde(cie, 0x401000, 0x10, {});
  b.fde(cie, 0x401010, 0x10, def_cfa_offset(24));   // adjacent: no NONE between
  b.fde(cie, 0x401030, 0x8, {});                     // 0x10 gap before it
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x40100f)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401010)), rsp(24));
  EXPECT_EQ(describe(row_at(t, 0x401020)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x40102f)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x401030)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401038)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x401fff)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x402000)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x402010)), only(LW_CFA_NONE));
  EXPECT_EQ(describe(row_at(t, 0x4f0000)), only(LW_CFA_NONE));  // past the last page
  // Rows: 0x1000 rsp8, 0x1010 rsp24, 0x1020 NONE, 0x1030 rsp8, 0x1038 NONE,
  // 0x2000 rsp16, 0x2010 NONE.
  EXPECT_EQ(t.rows.size(), 7u);
}

TEST(UnwindTable, IdenticalRowsMergeAcrossFdes) {
  CfiBuilder b;
  const size_t cie = b.cie();
  // r12 changes: readelf shows rows, the BPF side sees none of it.
  b.fde(cie, 0x401000, 0x10, cat({advance(2), offset(kR12, 2), advance(2), restore(kR12)}));
  b.fde(cie, 0x401010, 0x10, {});
  const UnwindTable t = build(b);
  EXPECT_EQ(t.rows.size(), 2u);  // rsp8 at 0x1000, NONE at 0x1020
  EXPECT_EQ(t.stats.cfi.rows, 4u);
  EXPECT_GT(t.stats.rows_before_merge, t.rows.size());
}

TEST(UnwindTable, FdesOutsideExecutableSegmentsAreDropped) {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x400100, 0x10, {});                          // in the read-only segment
  b.fde(cie, kTextVaddr + kTextSize - 0x8, 0x100, {});     // runs past the text: clipped
  const UnwindTable t = build(b);
  EXPECT_EQ(t.stats.fdes_outside_text, 1u);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].pc, off(kTextVaddr + kTextSize));
}

TEST(UnwindTable, OverlappingFdesLaterStartWins) {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x401000, 0x100, def_cfa_offset(16));
  b.fde(cie, 0x401040, 0x10, def_cfa_offset(32));
  const UnwindTable t = build(b);
  EXPECT_EQ(describe(row_at(t, 0x40103f)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401040)), rsp(32));
  EXPECT_EQ(describe(row_at(t, 0x401050)), only(LW_CFA_NONE));
  EXPECT_EQ(t.stats.fdes_overlapping, 1u);
}

TEST(UnwindTable, DebugFrameAbsolutePointersNoAugmentation) {
  // The FDE comes first and points forward: legal in .debug_frame, where
  // CIE pointers are offsets from the section's start. Its record is
  // 4 + 4 + 8 + 8 + 3 bytes, so the CIE lands at 27.
  CfiBuilder b(0, CfiFormat::kDebugFrame);
  b.fde(27, 0x401000, 0x10, cat({advance(1), def_cfa_offset(16)}));
  ASSERT_EQ(b.cie("", standard_initial(), kUdata8, -8, 1, 3), 27u);
  const UnwindTable t = build(b);
  EXPECT_EQ(t.stats.source, CfiSource::kDebugFrame);
  EXPECT_EQ(t.stats.cfi.records_refused, 0u);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401001)), rsp(16));
  EXPECT_EQ(describe(row_at(t, 0x401010)), only(LW_CFA_NONE));
}

// Rows at exact page starts, a first page before any row, a page with the
// most rows a page can start, and every offset checked against a linear
// search: the page index plus 13 halvings must find the same row.
TEST(UnwindTable, PageIndexEdges) {
  CfiBuilder b;
  const size_t cie = b.cie();
  // FDE 1 starts exactly at file offset 0x3000 (vaddr 0x403000); a row at 0x4000.
  b.fde(cie, 0x403000, 0x2000, cat({advance2(0x1000), def_cfa_offset(16)}));
  // FDE 2: a new row at every byte of page 7 and its NONE row at the start
  // of page 8: the page's search range holds 4097 rows, the most possible.
  Bytes dense;
  for (int i = 0; i < 4096; ++i) append(dense, cat({advance(1), def_cfa_offset(i % 2 ? 16 : 24)}));
  b.fde(cie, 0x406fff, 0x1001, dense);
  const UnwindTable t = build(b);
  // First pages: before any row.
  EXPECT_EQ(t.pages[0], 0u);
  EXPECT_EQ(find_row(t, 0), nullptr);
  EXPECT_EQ(find_row(t, 0x2fff), nullptr);
  EXPECT_EQ(describe(*find_row(t, 0x3000)), rsp(8));
  EXPECT_EQ(describe(*find_row(t, 0x3fff)), rsp(8));
  EXPECT_EQ(describe(*find_row(t, 0x4000)), rsp(16));
  EXPECT_EQ(t.rows[t.pages[4]].pc, 0x4000u);
  EXPECT_EQ(describe(*find_row(t, 0x5000)), only(LW_CFA_NONE));
  EXPECT_EQ(t.pages.size(), (t.rows.back().pc >> LW_UNWIND_PAGE_SHIFT) + 1);
  unsigned max_steps = 0;
  for (uint32_t o = 0; o < (t.pages.size() + 2) << LW_UNWIND_PAGE_SHIFT; ++o) {
    unsigned steps = 0;
    const lw_unwind_row* got = find_row(t, o, &steps);
    auto it = std::upper_bound(t.rows.begin(), t.rows.end(), o,
                               [](uint32_t v, const lw_unwind_row& r) { return v < r.pc; });
    const lw_unwind_row* want = it == t.rows.begin() ? nullptr : &*(it - 1);
    ASSERT_EQ(got, want) << "offset " << o;
    max_steps = std::max(max_steps, steps);
  }
  EXPECT_LE(max_steps, unsigned{LW_UNWIND_MAX_SEARCH_STEPS});
  EXPECT_EQ(max_steps, unsigned{LW_UNWIND_MAX_SEARCH_STEPS});  // the dense page needs them all
  EXPECT_EQ(t.pages[8] - t.pages[7], 4096u);
}

TEST(UnwindTable, FindRowOnEmptyAndTinyTables) {
  UnwindTable empty;
  EXPECT_EQ(find_row(empty, 0), nullptr);
  EXPECT_TRUE(validate_table(empty).ok());
  CfiBuilder b;
  b.fde(b.cie(), 0x401000, 1, {});
  const UnwindTable t = build(b);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(describe(row_at(t, 0x401000)), rsp(8));
  EXPECT_EQ(describe(row_at(t, 0x401001)), only(LW_CFA_NONE));
}

TEST(UnwindTable, ValidateRefusesWhatBpfCannotSearch) {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x401000, 0x3000, cat({advance2(0x1800), def_cfa_offset(16)}));
  const UnwindTable good = build(b);
  ASSERT_TRUE(validate_table(good).ok());
  auto broken = [&](auto mutate) {
    UnwindTable t = good;
    mutate(t);
    return !validate_table(t).ok();
  };
  EXPECT_TRUE(broken([](UnwindTable& t) { std::swap(t.rows[0], t.rows[1]); }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows[1].pc = t.rows[0].pc; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.pages[1] = 99; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.pages.pop_back(); }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.pages.push_back(0); }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows[0].cfa_type = 8; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows[0].rbp_type = 4; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows.back().cfa_offset = 4; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows.back().cfa_type = LW_CFA_RSP; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows[1] = t.rows[0], t.rows[1].pc += 1; }));
  EXPECT_TRUE(broken([](UnwindTable& t) { t.rows[0].rbp_offset = 8; }));
}

}  // namespace
}  // namespace lw
