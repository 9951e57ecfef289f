// SPDX-License-Identifier: Apache-2.0
// Fuzzes the unwind-table compiler (core/unwind/cfi_parser.cc,
// unwind_table.cc) on raw CFI, and the cache reader (unwind_cache.cc).
//
// Input: a 25-byte header, then the payload.
//   byte 0      mode: even: .eh_frame, odd: .debug_frame; 2 (mod 3): cache file
//   bytes 1-8   the section's vaddr (LE)
//   bytes 9-16  the executable segment's vaddr
//   bytes 17-20 its size, bytes 21-24 its file offset
// The seeds in fuzz/corpus/unwind are real sections with their real
// addresses, so the fuzzer starts from FDEs that land in the text.
//
// Checked beyond "no crash": a table that builds is valid (validate_table),
// find_row agrees with a linear search, and it survives the cache round
// trip unchanged; a cache file that parses re-serializes to itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/unwind/unwind_cache.h"
#include "core/unwind/unwind_table.h"

namespace {

uint64_t le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void check_table(const lw::UnwindTable& t) {
  if (!lw::validate_table(t).ok()) abort();
  // A few offsets around each of the first rows, against a linear search.
  for (size_t i = 0; i < std::min<size_t>(t.rows.size(), 64); ++i) {
    for (uint32_t probe : {t.rows[i].pc - 1, t.rows[i].pc, t.rows[i].pc + 1}) {
      const lw_unwind_row* found = lw::find_row(t, probe);
      const lw_unwind_row* want = nullptr;
      for (const lw_unwind_row& r : t.rows) {
        if (r.pc <= probe) want = &r;
      }
      if (found != want) abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kHeader = 25;
  if (size < kHeader) return 0;
  const uint8_t mode = data[0];
  const uint8_t* payload = data + kHeader;
  const size_t payload_size = size - kHeader;
  lw::UnwindBuildLimits limits;
  limits.max_steps = 2'000'000;  // keeps each run well under libFuzzer's timeout
  limits.max_wall_ms = 0;        // deterministic: the step budget bounds the time

  if (mode % 3 == 2) {
    const std::string_view bytes(reinterpret_cast<const char*>(payload), payload_size);
    auto t = lw::parse_cached_table(bytes, "fuzz", "f00d", limits);
    if (t.ok()) {
      check_table(*t);
      if (lw::serialize(*t, "fuzz", "f00d") != bytes) abort();
    } else if (t.error().message.empty()) {
      abort();
    }
    return 0;
  }

  lw::CfiSection cfi;
  cfi.bytes = std::span<const uint8_t>(payload, payload_size);
  cfi.vaddr = le(data + 1, 8);
  cfi.format = mode % 2 == 0 ? lw::CfiFormat::kEhFrame : lw::CfiFormat::kDebugFrame;
  const uint64_t text_vaddr = le(data + 9, 8);
  const uint64_t text_size = le(data + 17, 4);
  const uint64_t text_offset = le(data + 21, 4);
  cfi.text_vaddr = text_vaddr;
  const std::vector<lw::ElfSegment> segments = {
      {text_vaddr, text_size, text_offset, text_size, true},
      {0, 0x1000, 0, 0x1000, false},
  };
  auto t = lw::build_unwind_table_from_cfi(cfi, segments, limits);
  if (!t.ok()) {
    if (t.error().message.empty()) abort();
    return 0;
  }
  check_table(*t);
  auto back = lw::parse_cached_table(lw::serialize(*t, "fuzz", "f00d"), "fuzz", "f00d", limits);
  auto same = [](const lw_unwind_row& a, const lw_unwind_row& b) {
    return memcmp(&a, &b, sizeof(a)) == 0;
  };
  if (!back.ok() || back->pages != t->pages ||
      !std::equal(back->rows.begin(), back->rows.end(), t->rows.begin(), t->rows.end(), same)) {
    abort();
  }
  return 0;
}
