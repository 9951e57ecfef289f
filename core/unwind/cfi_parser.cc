// SPDX-License-Identifier: Apache-2.0
#include "core/unwind/cfi_parser.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace lw {

namespace {

// DWARF register numbers on x86-64 (System V psABI, "DWARF Register Number
// Mapping").
constexpr uint64_t kRegRbp = 6;
constexpr uint64_t kRegRsp = 7;
constexpr uint64_t kRegRa = 16;

// Pointer encodings (LSB 5.0, "DWARF Exception Header Encoding").
constexpr uint8_t kPeOmit = 0xff;
constexpr uint8_t kPeFormatMask = 0x0f;
constexpr uint8_t kPeAppMask = 0x70;
constexpr uint8_t kPeIndirect = 0x80;
enum : uint8_t {
  kPeAbsptr = 0x00, kPeUleb128 = 0x01, kPeUdata2 = 0x02, kPeUdata4 = 0x03, kPeUdata8 = 0x04,
  kPeSleb128 = 0x09, kPeSdata2 = 0x0a, kPeSdata4 = 0x0b, kPeSdata8 = 0x0c,
};
enum : uint8_t { kPeAbs = 0x00, kPePcrel = 0x10, kPeTextrel = 0x20, kPeDatarel = 0x30,
                 kPeAligned = 0x50 };

// Reads little-endian values and LEB128s inside [pos, end) of the section.
// A read past `end` returns 0 and sets a sticky failure flag that callers
// test at instruction and record boundaries; nothing is ever read outside.
class Reader {
 public:
  Reader(std::span<const uint8_t> section, size_t pos, size_t end)
      : data_(section.data()), pos_(pos), end_(end) {}
  size_t pos() const { return pos_; }
  bool bad() const { return bad_; }
  bool at_end() const { return bad_ || pos_ >= end_; }
  size_t remaining() const { return at_end() ? 0 : end_ - pos_; }

  uint64_t fixed(size_t n) {  // n <= 8
    if (remaining() < n) return fail();
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{data_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(fixed(1)); }

  // At most 10 bytes; bits beyond 64 must be zero.
  uint64_t uleb() {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
      if (remaining() == 0) return fail();
      const uint64_t part = data_[pos_] & 0x7f;
      const bool more = (data_[pos_++] & 0x80) != 0;
      if (shift > 0 && shift < 64 && (part >> (64 - shift)) != 0) return fail();
      if (shift >= 64 && part != 0) return fail();
      if (shift < 64) v |= part << shift;
      if (!more) return v;
    }
    return fail();
  }
  int64_t sleb() {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
      if (remaining() == 0) return static_cast<int64_t>(fail());
      const uint8_t byte = data_[pos_++];
      if (shift < 64) v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        if (shift + 7 < 64 && (byte & 0x40) != 0) v |= ~uint64_t{0} << (shift + 7);
        return static_cast<int64_t>(v);
      }
    }
    return static_cast<int64_t>(fail());
  }
  std::span<const uint8_t> block(uint64_t n) {
    if (n > remaining()) {
      fail();
      return {};
    }
    std::span<const uint8_t> out(data_ + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  void skip(uint64_t n) { (void)block(n); }
  // NUL-terminated string; the NUL is consumed, not returned.
  std::string_view cstring() {
    const size_t n = remaining();
    const void* nul = n > 0 ? memchr(data_ + pos_, 0, n) : nullptr;
    if (nul == nullptr) {
      fail();
      return {};
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_),
                       static_cast<size_t>(static_cast<const uint8_t*>(nul) - (data_ + pos_)));
    pos_ += s.size() + 1;
    return s;
  }

 private:
  uint64_t fail() {
    bad_ = true;
    return 0;
  }
  const uint8_t* data_;
  size_t pos_;
  size_t end_;
  bool bad_ = false;
};

// Reads a pointer in encoding `enc`. With `apply`, the relative bases are
// applied (pcrel: the field's own vaddr); without, the raw value is
// returned, which is all that pc_range and a skipped personality need.
// False for omit, indirect (it needs the process's memory), bases the
// object does not have, or a truncated field.
bool read_pointer(Reader& r, uint8_t enc, const CfiSection& sec, unsigned address_size,
                  bool apply, uint64_t& out) {
  if (enc == kPeOmit) return false;
  if ((enc & kPeAppMask) == kPeAligned) {
    const uint64_t misalign = (sec.vaddr + r.pos()) % address_size;
    if (misalign != 0) r.skip(address_size - misalign);
  }
  const uint64_t field_vaddr = sec.vaddr + r.pos();
  uint64_t v = 0;
  switch (enc & kPeFormatMask) {
    case kPeAbsptr: v = r.fixed(address_size); break;
    case kPeUleb128: v = r.uleb(); break;
    case kPeUdata2: v = r.fixed(2); break;
    case kPeUdata4: v = r.fixed(4); break;
    case kPeUdata8: v = r.fixed(8); break;
    case kPeSleb128: v = static_cast<uint64_t>(r.sleb()); break;
    case kPeSdata2: v = static_cast<uint64_t>(int64_t{static_cast<int16_t>(r.fixed(2))}); break;
    case kPeSdata4: v = static_cast<uint64_t>(int64_t{static_cast<int32_t>(r.fixed(4))}); break;
    case kPeSdata8: v = r.fixed(8); break;
    default: return false;
  }
  if (r.bad()) return false;
  if (!apply) {
    out = v;
    return true;
  }
  if ((enc & kPeIndirect) != 0) return false;
  switch (enc & kPeAppMask) {
    case kPeAbs:
    case kPeAligned: break;
    case kPePcrel: v += field_vaddr; break;  // modulo 2^64, as the linker computed it
    case kPeTextrel:
      if (!sec.text_vaddr) return false;
      v += *sec.text_vaddr;
      break;
    case kPeDatarel:
      if (!sec.data_vaddr) return false;
      v += *sec.data_vaddr;
      break;
    default: return false;  // funcrel: no function to be relative to here
  }
  out = v;
  return true;
}

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = 1;
  uint64_t ra_reg = kRegRa;
  uint8_t fde_encoding = kPeAbsptr;
  unsigned address_size = 8;
  bool augmented = false;     // 'z': FDEs carry an augmentation data block
  bool signal_frame = false;  // 'S'
  std::span<const uint8_t> initial_instructions;
};

// The framing of one record: [offset, end), the CIE id / pointer at `body`.
struct Record {
  size_t offset = 0;
  size_t body = 0;
  size_t end = 0;
  bool dwarf64 = false;
};

enum class Framing { kRecord, kTerminator, kBroken };

Framing frame_record(std::span<const uint8_t> bytes, size_t pos, Record& rec) {
  Reader r(bytes, pos, bytes.size());
  uint64_t length = r.fixed(4);
  if (r.bad()) return Framing::kBroken;
  if (length == 0) return Framing::kTerminator;
  rec.offset = pos;
  rec.dwarf64 = length == 0xffffffffu;
  if (rec.dwarf64) {
    length = r.fixed(8);
    if (r.bad()) return Framing::kBroken;
  } else if (length >= 0xfffffff0u) {
    return Framing::kBroken;  // reserved lengths
  }
  if (length > r.remaining()) return Framing::kBroken;
  rec.body = r.pos();
  rec.end = rec.body + static_cast<size_t>(length);
  return Framing::kRecord;
}

// The CIE id field: returns true for a CIE; otherwise sets `cie_offset`
// (false with ok=false when the pointer cannot point into the section).
bool read_cie_id(const CfiSection& sec, const Record& rec, bool& ok, uint64_t& cie_offset) {
  Reader r(sec.bytes, rec.body, rec.end);
  ok = true;
  if (sec.format == CfiFormat::kEhFrame) {
    // Always 4 bytes in .eh_frame, relative to the field itself.
    const uint64_t id = r.fixed(4);
    if (r.bad()) return ok = false;
    if (id == 0) return true;
    if (id > rec.body) return ok = false;  // would point before the section
    cie_offset = rec.body - id;
    return false;
  }
  const uint64_t id = r.fixed(rec.dwarf64 ? 8 : 4);
  if (r.bad()) return ok = false;
  if (id == (rec.dwarf64 ? ~uint64_t{0} : 0xffffffffu)) return true;
  cie_offset = id;
  return false;
}

std::optional<Cie> parse_cie(const CfiSection& sec, const Record& rec) {
  Reader r(sec.bytes, rec.body, rec.end);
  r.skip(sec.format == CfiFormat::kDebugFrame && rec.dwarf64 ? 8 : 4);
  Cie cie;
  const uint8_t version = r.u8();
  const bool debug = sec.format == CfiFormat::kDebugFrame;
  if (version != 1 && version != 3 && !(debug && version == 4)) return std::nullopt;
  const std::string_view aug = r.cstring();
  if (r.bad()) return std::nullopt;
  if (version == 4) {
    cie.address_size = r.u8();
    if (r.u8() != 0) return std::nullopt;  // segment selectors: not on x86-64
    if (cie.address_size != 4 && cie.address_size != 8) return std::nullopt;
  }
  cie.code_align = r.uleb();
  cie.data_align = r.sleb();
  cie.ra_reg = version == 1 ? r.u8() : r.uleb();
  if (r.bad()) return std::nullopt;
  if (!aug.empty()) {
    // Without 'z' the augmentation's size is unknown, so nothing after it
    // (the initial instructions) can be found: GCC 2's "eh" and the like.
    if (aug[0] != 'z') return std::nullopt;
    cie.augmented = true;
    const uint64_t aug_len = r.uleb();
    if (r.bad() || aug_len > r.remaining()) return std::nullopt;
    const size_t aug_end = r.pos() + static_cast<size_t>(aug_len);
    Reader a(sec.bytes, r.pos(), aug_end);
    for (char c : aug.substr(1)) {
      if (c == 'R') {
        cie.fde_encoding = a.u8();
      } else if (c == 'L') {
        (void)a.u8();  // LSDA encoding: exception tables are not our business
      } else if (c == 'P') {
        uint64_t ignored;
        const uint8_t enc = a.u8();
        if (!read_pointer(a, enc, sec, cie.address_size, false, ignored)) return std::nullopt;
      } else if (c == 'S') {
        cie.signal_frame = true;
      } else if (c != 'B' && c != 'G') {
        break;  // unknown: 'z' gave the data's size, so it can be skipped
      }
      if (a.bad()) return std::nullopt;
    }
    r.skip(aug_len);
  }
  if (r.bad() || cie.code_align == 0) return std::nullopt;
  cie.initial_instructions = r.block(r.remaining());
  return cie;
}

enum class RuleKind : uint8_t {
  kUnmentioned,  // no rule: the x86-64 ABI's "same value" for callee-saved rbp
  kSameValue, kUndefined, kOffset, kValOffset, kRegister, kExpression, kValExpression,
  kUnrepresentable,  // an offset that overflowed while factoring
};

struct RegRule {
  RuleKind kind = RuleKind::kUnmentioned;
  int64_t offset = 0;
};

enum class CfaKind : uint8_t { kUnset, kRegOffset, kExpression };

struct CfaRule {
  CfaKind kind = CfaKind::kUnset;
  uint64_t reg = 0;
  int64_t offset = 0;
  bool offset_valid = true;
  std::span<const uint8_t> expression;
};

struct FrameState {
  CfaRule cfa;
  RegRule rbp;
  RegRule ra;
};

// DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
// DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus: what binutils
// emits for 16-byte .plt entries (the CFA grows by 8 at the entry's push).
// Byte 6 is DW_OP_litN.
constexpr uint8_t kPltExpression[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a,
                                      0x00, 0x2a, 0x33, 0x24, 0x22};
// Thresholds past 15 cannot be met by (pc & 15): not an expression binutils
// writes, and validate_table refuses them (found by fuzz_unwind).
constexpr uint8_t kOpLit0 = 0x30, kOpLit15 = 0x3f, kOpBreg6 = 0x76, kOpDeref = 0x06;

bool fits_s32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }
bool fits_s16(int64_t v) { return v >= INT16_MIN && v <= INT16_MAX; }

// The CFA expressions we evaluate; anything else is UNSUPPORTED.
lw_unwind_row reduce_cfa_expression(std::span<const uint8_t> e) {
  lw_unwind_row row{};
  row.cfa_type = LW_CFA_UNSUPPORTED;
  if (e.size() == sizeof(kPltExpression) && e[6] >= kOpLit0 && e[6] <= kOpLit15 &&
      memcmp(e.data(), kPltExpression, 6) == 0 &&
      memcmp(e.data() + 7, kPltExpression + 7, 4) == 0) {
    row.cfa_type = LW_CFA_PLT;
    row.cfa_offset = e[6] - kOpLit0;
    return row;
  }
  if (!e.empty() && e[0] == kOpBreg6 && e.back() == kOpDeref) {
    Reader r(e, 1, e.size() - 1);
    const int64_t offset = r.sleb();
    if (!r.bad() && r.at_end() && fits_s32(offset)) {
      row.cfa_type = LW_CFA_DEREF_RBP;
      row.cfa_offset = static_cast<int32_t>(offset);
    }
  }
  return row;
}

lw_unwind_row reduce(const FrameState& s, bool signal_frame) {
  lw_unwind_row row{};
  if (signal_frame) {
    row.cfa_type = LW_CFA_SIGNAL;
    return row;
  }
  if (s.ra.kind == RuleKind::kUndefined) {
    row.cfa_type = LW_CFA_END;
    return row;
  }
  row.cfa_type = LW_CFA_UNSUPPORTED;
  if (s.ra.kind != RuleKind::kOffset || s.ra.offset != -8) return row;
  if (s.cfa.kind == CfaKind::kExpression) {
    row = reduce_cfa_expression(s.cfa.expression);
  } else if (s.cfa.kind == CfaKind::kRegOffset && s.cfa.offset_valid && fits_s32(s.cfa.offset) &&
             (s.cfa.reg == kRegRsp || s.cfa.reg == kRegRbp)) {
    row.cfa_type = s.cfa.reg == kRegRsp ? LW_CFA_RSP : LW_CFA_RBP;
    row.cfa_offset = static_cast<int32_t>(s.cfa.offset);
  }
  if (row.cfa_type == LW_CFA_UNSUPPORTED) return row;
  switch (s.rbp.kind) {
    case RuleKind::kUnmentioned:
    case RuleKind::kSameValue: row.rbp_type = LW_RBP_SAME; break;
    case RuleKind::kUndefined: row.rbp_type = LW_RBP_UNDEFINED; break;
    case RuleKind::kOffset:
      if (fits_s16(s.rbp.offset)) {
        row.rbp_type = LW_RBP_AT_CFA;
        row.rbp_offset = static_cast<int16_t>(s.rbp.offset);
      } else {
        row.rbp_type = LW_RBP_UNSUPPORTED;
      }
      break;
    default: row.rbp_type = LW_RBP_UNSUPPORTED; break;
  }
  return row;
}

bool same_rule(const lw_unwind_row& a, const lw_unwind_row& b) {
  return a.cfa_type == b.cfa_type && a.cfa_offset == b.cfa_offset && a.rbp_type == b.rbp_type &&
         a.rbp_offset == b.rbp_offset;
}

Error limit_error(const char* what, uint64_t limit, uint64_t record_offset) {
  return Error{E2BIG, std::string(what) + " over the limit of " + std::to_string(limit) +
                          " (record at section offset " + std::to_string(record_offset) + ")"};
}

enum class ProgramEnd { kDone, kMalformed };

// Runs one CIE's initial instructions, then one FDE's, emitting a row at
// each address where the reduced rules change. Iterative; the only growing
// state is the remember_state stack, bounded by the limits.
class ProgramRunner {
 public:
  ProgramRunner(const CfiSection& sec, const UnwindBuildLimits& limits, CfiStats& stats,
                std::vector<CfiRow>& rows, std::vector<FrameState>& stack)
      : sec_(sec), limits_(limits), stats_(stats), rows_(rows), stack_(stack) {}

  Result<ProgramEnd> run(const Cie& cie, uint64_t pc_begin, uint64_t pc_end,
                         std::span<const uint8_t> fde_program, uint64_t record_offset) {
    cie_ = &cie;
    record_offset_ = record_offset;
    loc_ = pc_begin;
    end_ = pc_end;
    done_ = false;
    rows_.clear();
    stack_.clear();
    state_ = FrameState{};
    in_cie_ = true;
    Result<ProgramEnd> r = exec(cie.initial_instructions);
    if (!r.ok() || *r == ProgramEnd::kMalformed) return r;
    initial_ = state_;
    in_cie_ = false;
    r = exec(fde_program);
    if (!r.ok() || *r == ProgramEnd::kMalformed) return r;
    emit();
    return ProgramEnd::kDone;
  }

 private:
  void emit() {
    if (done_) return;
    const lw_unwind_row row = reduce(state_, cie_->signal_frame);
    ++stats_.rows;
    if (!rows_.empty() && same_rule(rows_.back().rule, row)) return;
    rows_.push_back({loc_, row});
  }

  // An advance that overflows or reaches the FDE's end stops the program:
  // nothing after it can apply inside the FDE.
  void advance_by(uint64_t units) {
    uint64_t delta, next;
    if (__builtin_mul_overflow(units, cie_->code_align, &delta) ||
        __builtin_add_overflow(loc_, delta, &next)) {
      next = end_;
    }
    advance_to(next);
  }
  void advance_to(uint64_t next) {
    if (next == loc_) return;
    emit();
    if (next >= end_) {
      done_ = true;
      return;
    }
    loc_ = next;
  }

  RegRule factored(uint64_t n, bool negate = false) const {
    int64_t v;
    if (n > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(static_cast<int64_t>(n), cie_->data_align, &v) ||
        (negate && v == INT64_MIN)) {
      return {RuleKind::kUnrepresentable, 0};
    }
    return {RuleKind::kOffset, negate ? -v : v};
  }
  RegRule factored_signed(int64_t n) const {
    int64_t v;
    if (__builtin_mul_overflow(n, cie_->data_align, &v)) return {RuleKind::kUnrepresentable, 0};
    return {RuleKind::kOffset, v};
  }
  void set_cfa_offset(bool valid, int64_t offset) {
    cfa().offset_valid = valid;
    cfa().offset = valid ? offset : 0;
  }
  CfaRule& cfa() { return state_.cfa; }

  void set_rule(uint64_t reg, RegRule rule) {
    if (reg == kRegRbp) state_.rbp = rule;
    if (reg == cie_->ra_reg) state_.ra = rule;
  }
  void restore(uint64_t reg) {
    // In the CIE's own instructions there is no initial state yet.
    if (reg == kRegRbp) state_.rbp = in_cie_ ? RegRule{} : initial_.rbp;
    if (reg == cie_->ra_reg) state_.ra = in_cie_ ? RegRule{} : initial_.ra;
  }

  // `program` lies inside the section: it is read in place, so that
  // DW_CFA_set_loc's pcrel base is the operand's own address.
  Result<ProgramEnd> exec(std::span<const uint8_t> program) {
    const size_t start =
        program.empty() ? 0 : static_cast<size_t>(program.data() - sec_.bytes.data());
    Reader r(sec_.bytes, start, start + program.size());
    while (!r.at_end() && !done_) {
      if (++stats_.steps > limits_.max_steps) {
        return limit_error("CFA instructions decoded", limits_.max_steps, record_offset_);
      }
      const uint8_t op = r.u8();
      const uint8_t operand = op & 0x3f;
      switch (op >> 6) {
        case 1:  // DW_CFA_advance_loc
          if (in_cie_) return ProgramEnd::kMalformed;
          advance_by(operand);
          continue;
        case 2: {  // DW_CFA_offset
          const uint64_t n = r.uleb();
          set_rule(operand, factored(n));
          break;
        }
        case 3:  // DW_CFA_restore
          restore(operand);
          continue;
        default:
          break;
      }
      if (op >= 0x40) {
        if (r.bad()) return ProgramEnd::kMalformed;
        continue;
      }
      switch (op) {
        case 0x00: break;  // DW_CFA_nop
        case 0x01: {       // DW_CFA_set_loc
          uint64_t next;
          if (in_cie_ ||
              !read_pointer(r, cie_->fde_encoding, sec_, cie_->address_size, true, next) ||
              next < loc_) {
            return ProgramEnd::kMalformed;
          }
          advance_to(next);
          break;
        }
        case 0x02: case 0x03: case 0x04: {  // DW_CFA_advance_loc1/2/4
          if (in_cie_) return ProgramEnd::kMalformed;
          const uint64_t units = r.fixed(op == 0x02 ? 1 : op == 0x03 ? 2 : 4);
          if (r.bad()) return ProgramEnd::kMalformed;
          advance_by(units);
          break;
        }
        case 0x05: {  // DW_CFA_offset_extended
          const uint64_t reg = r.uleb();
          set_rule(reg, factored(r.uleb()));
          break;
        }
        case 0x06: restore(r.uleb()); break;                                  // restore_extended
        case 0x07: set_rule(r.uleb(), {RuleKind::kUndefined, 0}); break;      // undefined
        case 0x08: set_rule(r.uleb(), {RuleKind::kSameValue, 0}); break;      // same_value
        case 0x09: {                                                          // register
          const uint64_t reg = r.uleb();
          (void)r.uleb();
          set_rule(reg, {RuleKind::kRegister, 0});
          break;
        }
        case 0x0a:  // DW_CFA_remember_state: the CFA rule is saved too, as
                    // libgcc and GCC's `.cfi_remember_state` users expect
          if (stack_.size() >= limits_.max_remember_depth) {
            return limit_error("DW_CFA_remember_state depth", limits_.max_remember_depth,
                               record_offset_);
          }
          stack_.push_back(state_);
          if (stack_.size() > stats_.max_remember_depth) {
            stats_.max_remember_depth = static_cast<uint32_t>(stack_.size());
          }
          break;
        case 0x0b:  // DW_CFA_restore_state
          if (stack_.empty()) return ProgramEnd::kMalformed;
          state_ = stack_.back();
          stack_.pop_back();
          break;
        case 0x0c: {  // DW_CFA_def_cfa
          const uint64_t reg = r.uleb();
          const uint64_t offset = r.uleb();
          cfa() = CfaRule{CfaKind::kRegOffset, reg, 0, true, {}};
          set_cfa_offset(offset <= static_cast<uint64_t>(INT64_MAX), static_cast<int64_t>(offset));
          break;
        }
        case 0x0d:  // DW_CFA_def_cfa_register: keeps the offset
          cfa().reg = r.uleb();
          cfa().kind = CfaKind::kRegOffset;
          break;
        case 0x0e: {  // DW_CFA_def_cfa_offset: keeps the register
          const uint64_t offset = r.uleb();
          set_cfa_offset(offset <= static_cast<uint64_t>(INT64_MAX), static_cast<int64_t>(offset));
          break;
        }
        case 0x0f: {  // DW_CFA_def_cfa_expression
          const std::span<const uint8_t> e = r.block(r.uleb());
          cfa().kind = CfaKind::kExpression;
          cfa().expression = e;
          break;
        }
        case 0x10: case 0x16: {  // DW_CFA_expression, DW_CFA_val_expression
          const uint64_t reg = r.uleb();
          r.skip(r.uleb());
          set_rule(reg, {op == 0x10 ? RuleKind::kExpression : RuleKind::kValExpression, 0});
          break;
        }
        case 0x11: {  // DW_CFA_offset_extended_sf
          const uint64_t reg = r.uleb();
          set_rule(reg, factored_signed(r.sleb()));
          break;
        }
        case 0x12: {  // DW_CFA_def_cfa_sf
          const uint64_t reg = r.uleb();
          const RegRule offset = factored_signed(r.sleb());
          cfa() = CfaRule{CfaKind::kRegOffset, reg, 0, true, {}};
          set_cfa_offset(offset.kind == RuleKind::kOffset, offset.offset);
          break;
        }
        case 0x13: {  // DW_CFA_def_cfa_offset_sf
          const RegRule offset = factored_signed(r.sleb());
          set_cfa_offset(offset.kind == RuleKind::kOffset, offset.offset);
          break;
        }
        case 0x14: case 0x15: {  // DW_CFA_val_offset(_sf)
          const uint64_t reg = r.uleb();
          if (op == 0x14) (void)r.uleb(); else (void)r.sleb();
          set_rule(reg, {RuleKind::kValOffset, 0});
          break;
        }
        case 0x2e: (void)r.uleb(); break;  // DW_CFA_GNU_args_size
        case 0x2f: {                       // DW_CFA_GNU_negative_offset_extended
          const uint64_t reg = r.uleb();
          set_rule(reg, factored(r.uleb(), true));
          break;
        }
        default: return ProgramEnd::kMalformed;
      }
      if (r.bad()) return ProgramEnd::kMalformed;
    }
    return ProgramEnd::kDone;
  }

  const CfiSection& sec_;
  const UnwindBuildLimits& limits_;
  CfiStats& stats_;
  std::vector<CfiRow>& rows_;
  std::vector<FrameState>& stack_;
  const Cie* cie_ = nullptr;
  uint64_t record_offset_ = 0;
  uint64_t loc_ = 0;
  uint64_t end_ = 0;
  bool done_ = false;
  bool in_cie_ = false;
  FrameState state_;
  FrameState initial_;
};

}  // namespace

Status parse_cfi(const CfiSection& sec, const UnwindBuildLimits& limits, CfiStats& stats,
                 const CfiFdeVisitor& on_fde) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  const std::span<const uint8_t> bytes = sec.bytes;
  const char* section_name = sec.format == CfiFormat::kEhFrame ? ".eh_frame" : ".debug_frame";
  auto broken = [&](size_t pos) {
    return Error{EINVAL, std::string(section_name) + ": record at offset " + std::to_string(pos) +
                             " runs past the end of the section"};
  };

  // Pass 1: frame every record and parse the CIEs, so that an FDE's CIE
  // pointer is accepted only if it names the start of a CIE that parsed
  // (.debug_frame may point forward; anything else is refused, whatever
  // the pointer: negative, mid-record, at an FDE, at itself).
  std::unordered_map<uint64_t, Cie> cies;
  uint64_t fde_records = 0;
  for (size_t pos = 0; pos < bytes.size();) {
    Record rec;
    const Framing f = frame_record(bytes, pos, rec);
    if (f == Framing::kTerminator) break;
    if (f == Framing::kBroken) return broken(pos);
    if (++stats.steps > limits.max_steps) {
      return limit_error("records and CFA instructions decoded", limits.max_steps, pos);
    }
    bool ok;
    uint64_t cie_offset;
    if (read_cie_id(sec, rec, ok, cie_offset)) {
      if (++stats.cies > limits.max_fdes) return limit_error("CIE records", limits.max_fdes, pos);
      if (std::optional<Cie> cie = parse_cie(sec, rec)) {
        cies.emplace(rec.offset, *cie);
      } else {
        ++stats.records_refused;
      }
    } else if (++fde_records > limits.max_fdes) {
      return limit_error("FDE records", limits.max_fdes, pos);
    }
    pos = rec.end;
  }

  // Pass 2: the FDEs.
  std::vector<CfiRow> rows;
  std::vector<FrameState> stack;
  ProgramRunner runner(sec, limits, stats, rows, stack);
  for (size_t pos = 0; pos < bytes.size();) {
    Record rec;
    if (frame_record(bytes, pos, rec) != Framing::kRecord) break;  // pass 1 vetted the framing
    pos = rec.end;
    bool ok;
    uint64_t cie_offset = 0;
    if (read_cie_id(sec, rec, ok, cie_offset)) continue;
    ++stats.fdes;
    if (limits.max_wall_ms != 0 && (stats.fdes & 255) == 0 &&
        Clock::now() - started > std::chrono::milliseconds(limits.max_wall_ms)) {
      return Error{ETIME, std::string(section_name) + ": build time over the limit of " +
                              std::to_string(limits.max_wall_ms) + " ms"};
    }
    auto cie_it = cies.find(cie_offset);
    if (!ok || cie_it == cies.end()) {
      ++stats.records_refused;
      continue;
    }
    const Cie& cie = cie_it->second;
    Reader r(bytes, rec.body, rec.end);
    r.skip(sec.format == CfiFormat::kDebugFrame && rec.dwarf64 ? 8 : 4);
    uint64_t pc_begin, pc_range;
    if (!read_pointer(r, cie.fde_encoding, sec, cie.address_size, true, pc_begin) ||
        !read_pointer(r, cie.fde_encoding & kPeFormatMask, sec, cie.address_size, false,
                      pc_range) ||
        pc_begin > UINT64_MAX - pc_range) {
      ++stats.records_refused;
      continue;
    }
    if (pc_range == 0) {
      ++stats.fdes_empty;
      continue;
    }
    if (cie.augmented) r.skip(r.uleb());
    const std::span<const uint8_t> program = r.block(r.remaining());
    const uint64_t program_bytes = cie.initial_instructions.size() + program.size();
    if (program_bytes > limits.max_program_bytes) {
      return limit_error("CFA program bytes of one FDE", limits.max_program_bytes, rec.offset);
    }
    if (program_bytes > stats.max_program_bytes) stats.max_program_bytes = program_bytes;

    CfiFde fde;
    fde.record_offset = rec.offset;
    fde.pc_begin = pc_begin;
    fde.pc_end = pc_begin + pc_range;
    Result<ProgramEnd> end = ProgramEnd::kMalformed;
    if (!r.bad() && cie.ra_reg == kRegRa) {
      end = runner.run(cie, fde.pc_begin, fde.pc_end, program, rec.offset);
      if (!end.ok()) return end.error();
    }
    if (*end == ProgramEnd::kMalformed) {
      ++stats.fdes_malformed;
      lw_unwind_row unsupported{};
      unsupported.cfa_type = LW_CFA_UNSUPPORTED;
      rows.assign(1, CfiRow{fde.pc_begin, unsupported});
    }
    fde.malformed = *end == ProgramEnd::kMalformed;
    fde.rows = rows;
    if (Status s = on_fde(fde); !s.ok()) return s;
  }
  return ok_status();
}

}  // namespace lw
