/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * Compact unwind rows: the call-frame information (CFI) of one ELF object,
 * compiled by the daemon (core/unwind/unwind_table.h) and binary-searched by
 * the BPF unwinder. Both sides include this file; nothing is copied. The
 * row layout has a fixed size checked at compile time on both sides.
 *
 * Rows are keyed by FILE OFFSET, not virtual address: bpf_find_vma() gives
 * the mapping's file offset directly, and a file offset does not depend on
 * where (or how often) the object is mapped. vaddr and file offset are
 * congruent modulo the page size inside a PT_LOAD segment, so (pc & 15) is
 * the same in both (LW_CFA_PLT relies on it).
 */
#ifndef LW_UNWIND_ABI_H
#define LW_UNWIND_ABI_H

#ifdef __BPF__
/* vmlinux.h provides __u32/__s32/__s16/__u8. */
#else
#include <linux/types.h>
#endif

enum lw_cfa_type {
  LW_CFA_NONE = 0,        /* no CFI covers this address (gap between FDEs) */
  LW_CFA_RSP = 1,         /* CFA = rsp + cfa_offset */
  LW_CFA_RBP = 2,         /* CFA = rbp + cfa_offset */
  LW_CFA_PLT = 3,         /* PLT stub: CFA = rsp + 8, plus 8 when (pc & 15) >= cfa_offset */
  LW_CFA_DEREF_RBP = 4,   /* CFA = *(rbp + cfa_offset) (stack realignment: DW_OP_breg6 N; DW_OP_deref) */
  LW_CFA_SIGNAL = 5,      /* signal return trampoline (CIE augmentation 'S', glibc __restore_rt): registers are read from the ucontext at rsp */
  LW_CFA_END = 6,         /* outermost frame: return address undefined (_start, clone, thread start): the stack is complete here */
  LW_CFA_UNSUPPORTED = 7, /* a rule we do not evaluate (CFA on another register, another expression, return address not at CFA-8, offsets out of range) */
};

enum lw_rbp_type {
  LW_RBP_SAME = 0,        /* rbp unchanged in this frame (same value / never mentioned) */
  LW_RBP_AT_CFA = 1,      /* the caller's rbp is saved at CFA + rbp_offset */
  LW_RBP_UNDEFINED = 2,
  LW_RBP_UNSUPPORTED = 3, /* register rule, expression, val_offset...: unknown in the caller */
};

/* The return address is always at CFA - 8 for RSP, RBP, PLT and DEREF_RBP
 * rows: a row whose return-address rule is anything else is UNSUPPORTED.
 * cfa_offset and rbp_offset are 0 where their type does not use them, so
 * identical rules compare equal byte for byte. */
struct lw_unwind_row {   /* 12 bytes, sorted by pc */
  __u32 pc;              /* FILE OFFSET (not vaddr) of the first instruction the row covers */
  __s32 cfa_offset;
  __s16 rbp_offset;
  __u8 cfa_type;         /* enum lw_cfa_type */
  __u8 rbp_type;         /* enum lw_rbp_type */
};

#define LW_UNWIND_PAGE_SHIFT 12
/* Page index: pages[p] = index of the row in effect at file offset p << LW_UNWIND_PAGE_SHIFT
 * (the last row with pc <= that offset; 0 if none). To find the row for file offset `off`:
 * p = off >> SHIFT; search [pages[p], p + 1 < npages ? pages[p + 1] : nrows - 1] for the last
 * row with row.pc <= off. At most 4096 rows can start in one page, so 13 search steps suffice. */
#define LW_UNWIND_MAX_SEARCH_STEPS 13
/* npages = (rows[nrows - 1].pc >> LW_UNWIND_PAGE_SHIFT) + 1; an offset in a
 * page >= npages is past the last row, which always is LW_CFA_NONE. */

#ifdef __cplusplus
static_assert(sizeof(struct lw_unwind_row) == 12, "lw_unwind_row ABI");
#else
_Static_assert(sizeof(struct lw_unwind_row) == 12, "lw_unwind_row ABI");
#endif

#endif /* LW_UNWIND_ABI_H */
