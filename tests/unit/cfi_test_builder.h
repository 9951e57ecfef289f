// SPDX-License-Identifier: Apache-2.0
// Hand-assembled .eh_frame / .debug_frame blobs for the unwind-table tests:
// each CIE, FDE and CFA instruction is written byte by byte, so a test
// says exactly which encoding it exercises (and can break any of them).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/unwind/cfi_parser.h"
#include "core/symbols/elf_file.h"

namespace lw::cfi_test {

using Bytes = std::vector<uint8_t>;

inline void append(Bytes& out, const Bytes& more) {
  out.insert(out.end(), more.begin(), more.end());
}

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) append(out, p);
  return out;
}

inline Bytes uleb(uint64_t v) {
  Bytes out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v != 0) b |= 0x80;
    out.push_back(b);
  } while (v != 0);
  return out;
}

inline Bytes sleb(int64_t v) {
  Bytes out;
  bool more = true;
  while (more) {
    uint8_t b = v & 0x7f;
    v >>= 7;  // arithmetic shift (C++20)
    more = !((v == 0 && (b & 0x40) == 0) || (v == -1 && (b & 0x40) != 0));
    if (more) b |= 0x80;
    out.push_back(b);
  }
  return out;
}

inline Bytes le(uint64_t v, size_t n) {
  Bytes out;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return out;
}

// DWARF registers (x86-64).
constexpr uint8_t kRbp = 6, kRsp = 7, kR10 = 10, kR12 = 12, kRa = 16;

// CFA instructions.
inline Bytes nop() { return {0x00}; }
inline Bytes advance(uint8_t delta) { return {static_cast<uint8_t>(0x40 | (delta & 0x3f))}; }
inline Bytes advance1(uint8_t d) { return {0x02, d}; }
inline Bytes advance2(uint16_t d) { return cat({{0x03}, le(d, 2)}); }
inline Bytes advance4(uint32_t d) { return cat({{0x04}, le(d, 4)}); }
inline Bytes def_cfa(uint64_t reg, uint64_t off) { return cat({{0x0c}, uleb(reg), uleb(off)}); }
inline Bytes def_cfa_sf(uint64_t reg, int64_t f) { return cat({{0x12}, uleb(reg), sleb(f)}); }
inline Bytes def_cfa_register(uint64_t reg) { return cat({{0x0d}, uleb(reg)}); }
inline Bytes def_cfa_offset(uint64_t off) { return cat({{0x0e}, uleb(off)}); }
inline Bytes def_cfa_offset_sf(int64_t f) { return cat({{0x13}, sleb(f)}); }
inline Bytes def_cfa_expression(const Bytes& e) { return cat({{0x0f}, uleb(e.size()), e}); }
// Saved at CFA + factored * data_align.
inline Bytes offset(uint8_t reg, uint64_t factored) {
  if (reg < 64) return cat({{static_cast<uint8_t>(0x80 | reg)}, uleb(factored)});
  return cat({{0x05}, uleb(reg), uleb(factored)});
}
inline Bytes offset_sf(uint64_t reg, int64_t factored) {
  return cat({{0x11}, uleb(reg), sleb(factored)});
}
inline Bytes restore(uint8_t reg) { return {static_cast<uint8_t>(0xc0 | reg)}; }
inline Bytes restore_extended(uint64_t reg) { return cat({{0x06}, uleb(reg)}); }
inline Bytes undefined(uint64_t reg) { return cat({{0x07}, uleb(reg)}); }
inline Bytes same_value(uint64_t reg) { return cat({{0x08}, uleb(reg)}); }
inline Bytes reg_in_reg(uint64_t reg, uint64_t where) {
  return cat({{0x09}, uleb(reg), uleb(where)});
}
inline Bytes remember_state() { return {0x0a}; }
inline Bytes restore_state() { return {0x0b}; }
inline Bytes expression(uint64_t reg, const Bytes& e) {
  return cat({{0x10}, uleb(reg), uleb(e.size()), e});
}
inline Bytes val_offset(uint64_t reg, uint64_t f) { return cat({{0x14}, uleb(reg), uleb(f)}); }
inline Bytes val_expression(uint64_t reg, const Bytes& e) {
  return cat({{0x16}, uleb(reg), uleb(e.size()), e});
}
inline Bytes args_size(uint64_t n) { return cat({{0x2e}, uleb(n)}); }

// binutils' .plt CFA: rsp + 8, + 8 when (rip & 15) >= n.
inline Bytes plt_expression(uint8_t n) {
  return {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, static_cast<uint8_t>(0x30 + n),
          0x2a, 0x33, 0x24, 0x22};
}
// DW_OP_breg6 (rbp) n; DW_OP_deref
inline Bytes deref_rbp_expression(int64_t n) { return cat({{0x76}, sleb(n), {0x06}}); }

// The x86-64 CIE's usual initial rules: CFA = rsp + 8, return address at CFA-8.
inline Bytes standard_initial() { return cat({def_cfa(kRsp, 8), offset(kRa, 1)}); }

constexpr uint8_t kPcrelSdata4 = 0x1b;  // DW_EH_PE_pcrel | DW_EH_PE_sdata4
constexpr uint8_t kUdata8 = 0x04;

// Builds one section. Offsets returned by cie() are what fde() takes.
class CfiBuilder {
 public:
  explicit CfiBuilder(uint64_t section_vaddr = 0x500000, CfiFormat format = CfiFormat::kEhFrame)
      : vaddr_(section_vaddr), format_(format) {}

  size_t cie(const std::string& augmentation = "zR", const Bytes& initial = standard_initial(),
             uint8_t fde_encoding = kPcrelSdata4, int64_t data_align = -8,
             uint64_t code_align = 1, uint8_t version = 1) {
    fde_encoding_ = fde_encoding;
    Bytes body = format_ == CfiFormat::kEhFrame ? le(0, 4) : le(0xffffffff, 4);
    body.push_back(version);
    body.insert(body.end(), augmentation.begin(), augmentation.end());
    body.push_back(0);
    append(body, uleb(code_align));
    append(body, sleb(data_align));
    if (version == 1) body.push_back(kRa); else append(body, uleb(kRa));
    if (!augmentation.empty() && augmentation[0] == 'z') {
      Bytes aug;
      for (char c : augmentation.substr(1)) {
        if (c == 'R') aug.push_back(fde_encoding);
        if (c == 'L') aug.push_back(kPcrelSdata4);
        if (c == 'P') append(aug, cat({{0x9b}, le(0x1234, 4)}));  // indirect pcrel sdata4
      }
      append(body, uleb(aug.size()));
      append(body, aug);
    }
    append(body, initial);
    return record(body);
  }

  // An FDE for [pc, pc + range) under the CIE at `cie_offset`.
  size_t fde(size_t cie_offset, uint64_t pc, uint64_t range, const Bytes& program,
             bool augmented = true) {
    const size_t at = bytes_.size();
    const size_t id_pos = at + 4;
    Bytes body;
    if (format_ == CfiFormat::kEhFrame) {
      append(body, le(id_pos - cie_offset, 4));
      if (fde_encoding_ == kPcrelSdata4) {
        const uint64_t field_vaddr = vaddr_ + id_pos + 4;
        append(body, le(pc - field_vaddr, 4));
        append(body, le(range, 4));
      } else {
        append(body, le(pc, 8));
        append(body, le(range, 8));
      }
      if (augmented) body.push_back(0);  // augmentation data length
    } else {
      append(body, le(cie_offset, 4));
      append(body, le(pc, 8));
      append(body, le(range, 8));
    }
    append(body, program);
    return record(body);
  }

  void raw(const Bytes& b) { append(bytes_, b); }
  void terminator() { append(bytes_, le(0, 4)); }
  const Bytes& bytes() const { return bytes_; }
  Bytes& mutable_bytes() { return bytes_; }

  CfiSection section() const {
    CfiSection s;
    s.bytes = bytes_;
    s.vaddr = vaddr_;
    s.format = format_;
    return s;
  }

 private:
  size_t record(const Bytes& body) {
    const size_t at = bytes_.size();
    append(bytes_, le(body.size(), 4));
    append(bytes_, body);
    return at;
  }

  uint64_t vaddr_;
  CfiFormat format_;
  uint8_t fde_encoding_ = kPcrelSdata4;
  Bytes bytes_;
};

// The tests' object: text mapped at 0x401000 from file offset 0x1000, so a
// vaddr and its file offset always differ (by 0x400000).
constexpr uint64_t kTextVaddr = 0x401000;
constexpr uint64_t kTextOffset = 0x1000;
constexpr uint64_t kTextSize = 0x40000;
inline uint32_t off(uint64_t vaddr) {
  return static_cast<uint32_t>(vaddr - kTextVaddr + kTextOffset);
}

inline std::vector<ElfSegment> test_segments() {
  return {{0x400000, 0x1000, 0, 0x1000, false},
          {kTextVaddr, kTextSize, kTextOffset, kTextSize, true}};
}

}  // namespace lw::cfi_test
