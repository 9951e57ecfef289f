// SPDX-License-Identifier: Apache-2.0
// Hostile CFI and cache files: objects come from traced processes, cache
// files from a disk anyone with the daemon's rights can write. Every case
// must end in a clear Error or a sound table (validate_table), never a
// crash, a hang or unbounded memory.
#include <gtest/gtest.h>

#include <cerrno>
#include <random>

#include "core/unwind/unwind_cache.h"
#include "core/unwind/unwind_table.h"
#include "tests/unit/cfi_test_builder.h"

namespace lw {
namespace {

using namespace cfi_test;

Result<UnwindTable> build(const Bytes& bytes, const UnwindBuildLimits& limits = {},
                          CfiFormat format = CfiFormat::kEhFrame) {
  CfiSection s;
  s.bytes = bytes;
  s.vaddr = 0x500000;
  s.format = format;
  return build_unwind_table_from_cfi(s, test_segments(), limits);
}

// A good section to break: one CIE, two FDEs.
CfiBuilder good_section() {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x401000, 0x20, cat({advance(1), def_cfa_offset(16), offset(kRbp, 2)}));
  b.fde(cie, 0x401040, 0x20, cat({advance(4), def_cfa_offset(32)}));
  return b;
}

void expect_error_naming(const Result<UnwindTable>& r, const std::string& words) {
  ASSERT_FALSE(r.ok()) << "expected an error naming '" << words << "'";
  EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
}

TEST(UnwindHostile, TruncatedRecordsFailTheParse) {
  const Bytes good = good_section().bytes();
  ASSERT_TRUE(build(good).ok());
  // Every cut that lands inside a record leaves a record running past the end.
  for (size_t cut = 1; cut < good.size(); ++cut) {
    Bytes b(good.begin(), good.begin() + static_cast<long>(cut));
    auto r = build(b);
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("runs past the end"), std::string::npos);
    }
  }
  expect_error_naming(build(Bytes(good.begin(), good.begin() + 10)), "runs past the end");
}

TEST(UnwindHostile, LengthFieldsThatOverflow) {
  expect_error_naming(build(cat({le(0xfffffff0, 4), Bytes(16, 0)})),
                      "runs past the end");  // reserved
  expect_error_naming(build(cat({le(0xffffffff, 4), le(~uint64_t{0}, 8), Bytes(16, 0)})),
                      "runs past the end");
  expect_error_naming(build(cat({le(0xffffffff, 4), le(uint64_t{1} << 63, 8)})),
                      "runs past the end");
  expect_error_naming(build(le(0x7fffffff, 4)), "runs past the end");
  expect_error_naming(build(Bytes{0x01, 0x00}), "runs past the end");
  EXPECT_TRUE(build(Bytes{}).ok());
  EXPECT_TRUE(build(le(0, 4)).ok());  // a terminator alone
}

TEST(UnwindHostile, BadCiePointersAreRefusedNotFollowed) {
  CfiBuilder b;
  const size_t cie = b.cie();
  const size_t fde = b.fde(cie, 0x401000, 0x10, {});
  const size_t second = b.fde(cie, 0x401010, 0x10, {});
  auto with_pointer = [&](size_t record, uint32_t value) {
    Bytes bytes = b.bytes();
    const Bytes v = le(value, 4);
    std::copy(v.begin(), v.end(), bytes.begin() + static_cast<long>(record + 4));
    return bytes;
  };
  struct Case {
    const char* what;
    Bytes bytes;
  };
  const Case cases[] = {
      {"negative (before the section)", with_pointer(fde, static_cast<uint32_t>(fde + 4 + 100))},
      {"to itself", with_pointer(fde, 0)},  // id 0 makes it a CIE: which fails to parse
      {"to an FDE", with_pointer(second, static_cast<uint32_t>(second + 4 - fde))},
      {"mid-record", with_pointer(fde, static_cast<uint32_t>(fde + 4 - 3))},
      {"to the pointer's own field", with_pointer(second, 4)},
  };
  for (const Case& c : cases) {
    auto r = build(c.bytes);
    ASSERT_TRUE(r.ok()) << c.what << ": " << r.error().message;
    EXPECT_GE(r->stats.cfi.records_refused, 1u) << c.what;
    EXPECT_TRUE(validate_table(*r).ok()) << c.what;
  }
  // .debug_frame: absolute pointers, anywhere; only a CIE start counts.
  CfiBuilder d(0, CfiFormat::kDebugFrame);
  d.fde(0, 0x401000, 0x10, {});  // points at itself
  d.fde(1000000, 0x401010, 0x10, {});
  auto r = build(d.bytes(), {}, CfiFormat::kDebugFrame);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.cfi.records_refused, 2u);
  EXPECT_TRUE(r->rows.empty());
}

TEST(UnwindHostile, MalformedProgramsBecomeUnsupportedRanges) {
  const Bytes cases[] = {
      Bytes{0x3f},                          // an opcode DWARF does not define
      Bytes{0x2d},                          // DW_CFA_GNU_window_save: SPARC/AArch64 only
      Bytes{0x0b},                          // restore_state with nothing remembered
      Bytes{0x0c, 0x07},                    // def_cfa cut short
      cat({{0x0e}, Bytes(11, 0x80)}),       // a LEB128 longer than 10 bytes
      cat({{0x0e}, Bytes(9, 0xff), {0x7f}}),  // a ULEB128 over 64 bits
      cat({{0x0f}, uleb(1000), {0x77}}),    // an expression block past the end
      cat({advance(8), {0x01}, le(0x401004, 8)}),  // set_loc backwards
      cat({{0x01}, le(0x401004, 4)}),       // set_loc cut short
  };
  for (const Bytes& program : cases) {
    SCOPED_TRACE(::testing::PrintToString(program));
    CfiBuilder b;
    const size_t cie = b.cie("zR", standard_initial(), kUdata8);
    b.fde(cie, 0x401000, 0x10, program);
    b.fde(cie, 0x401010, 0x10, def_cfa_offset(16));
    auto r = build(b.bytes());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->stats.cfi.fdes_malformed, 1u);
    ASSERT_NE(find_row(*r, off(0x401008)), nullptr);
    EXPECT_EQ(find_row(*r, off(0x401008))->cfa_type, LW_CFA_UNSUPPORTED);
    EXPECT_EQ(find_row(*r, off(0x401010))->cfa_type, LW_CFA_RSP);  // the next FDE is intact
  }
}

TEST(UnwindHostile, BadCiesAreRefused) {
  struct Case {
    const char* what;
    std::string aug;
    Bytes initial;
    uint8_t version;
  };
  const Case cases[] = {
      {"version 2", "zR", standard_initial(), 2},
      {"augmentation without z", "eh", standard_initial(), 1},
      {"advance in the CIE", "zR", cat({advance(1), def_cfa(kRsp, 8)}), 1},
  };
  for (const Case& c : cases) {
    CfiBuilder b;
    const size_t cie = b.cie(c.aug, c.initial, kPcrelSdata4, -8, 1, c.version);
    b.fde(cie, 0x401000, 0x10, {});
    auto r = build(b.bytes());
    ASSERT_TRUE(r.ok()) << c.what;
    EXPECT_GE(r->stats.cfi.records_refused + r->stats.cfi.fdes_malformed, 1u) << c.what;
    EXPECT_TRUE(r->rows.empty() || find_row(*r, off(0x401000))->cfa_type == LW_CFA_UNSUPPORTED);
    EXPECT_TRUE(validate_table(*r).ok());
  }
  // Augmentation data longer than the record.
  CfiBuilder b;
  Bytes body = cat({le(0, 4), {1, 'z', 'R', 0}, uleb(1), sleb(-8), {16}, uleb(200), {0x1b}});
  b.raw(cat({le(body.size(), 4), body}));
  auto r = build(b.bytes());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.cfi.records_refused, 1u);
  // Return-address column other than 16.
  CfiBuilder ra;
  Bytes cie = cat({le(0, 4), {1, 'z', 'R', 0}, uleb(1), sleb(-8), {5}, uleb(1), {0x1b},
                   standard_initial()});
  ra.raw(cat({le(cie.size(), 4), cie}));
  ra.fde(0, 0x401000, 0x10, {});
  r = build(ra.bytes());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.cfi.fdes_malformed, 1u);
}

TEST(UnwindHostile, HugeAdvancesAndRangesStayBounded) {
  CfiBuilder b;
  const size_t cie = b.cie("zR", standard_initial(), kPcrelSdata4, -8, ~uint64_t{0} >> 1);
  // code_align 2^63-1: every advance overflows; the program ends at once.
  b.fde(cie, 0x401000, 0x10, cat({advance4(0xffffffff), def_cfa_offset(16), advance(63)}));
  const size_t normal = b.cie();
  b.fde(normal, 0x401020, 0x10, cat({advance4(0xffffffff), def_cfa_offset(16)}));
  b.fde(normal, 0x401040, 0x7fffffff, {});  // runs past the text segment: clipped
  auto r = build(b.bytes());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(validate_table(*r).ok());
  EXPECT_EQ(find_row(*r, off(0x40100f))->cfa_offset, 8);
  EXPECT_EQ(find_row(*r, off(0x40102f))->cfa_offset, 8);
  EXPECT_EQ(r->rows.back().pc, off(kTextVaddr + kTextSize));
  // pc_begin + pc_range past 2^64.
  CfiBuilder w;
  const size_t c = w.cie("zR", standard_initial(), kUdata8);
  w.fde(c, ~uint64_t{0} - 4, 0x10, {});
  r = build(w.bytes());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.cfi.records_refused, 1u);
}

TEST(UnwindHostile, LimitsGiveErrorsNamingWhatWasExceeded) {
  // remember_state nesting.
  CfiBuilder deep;
  Bytes pushes;
  for (int i = 0; i < 100; ++i) append(pushes, remember_state());
  deep.fde(deep.cie(), 0x401000, 0x10, pushes);
  expect_error_naming(build(deep.bytes()), "remember_state depth over the limit of 32");
  UnwindBuildLimits roomy;
  roomy.max_remember_depth = 100;
  EXPECT_TRUE(build(deep.bytes(), roomy).ok());

  const Bytes good = good_section().bytes();
  UnwindBuildLimits l;
  l.max_fdes = 1;
  expect_error_naming(build(good, l), "FDE records over the limit of 1");
  l = {};
  l.max_rows = 3;
  expect_error_naming(build(good, l), "unwind rows over the limit of 3");
  l = {};
  l.max_steps = 5;
  expect_error_naming(build(good, l), "decoded over the limit of 5");
  l = {};
  l.max_program_bytes = 4;
  expect_error_naming(build(good, l), "CFA program bytes of one FDE over the limit of 4");

  // Many FDEs each running a long program: the step budget stops it.
  CfiBuilder slow;
  const size_t cie = slow.cie();
  const Bytes nops(60000, 0x00);
  for (int i = 0; i < 50; ++i) slow.fde(cie, 0x401000 + 16 * i, 16, nops);
  l = {};
  l.max_steps = 1'000'000;
  expect_error_naming(build(slow.bytes(), l), "CFA instructions decoded over the limit");
}

TEST(UnwindHostile, RandomAndMutatedInputs) {
  // A quick in-process fuzz (the libFuzzer harness, fuzz/fuzz_unwind.cc,
  // runs much longer): every input ends in an Error or a sound table.
  std::mt19937_64 rng(20240601);
  const Bytes seed = good_section().bytes();
  UnwindBuildLimits l;
  l.max_steps = 200000;
  for (int i = 0; i < 20000; ++i) {
    Bytes b;
    if (i % 4 == 0) {
      b.resize(rng() % 128);
      for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    } else {
      b = seed;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      if (rng() % 8 == 0) b.resize(rng() % b.size());
    }
    for (CfiFormat f : {CfiFormat::kEhFrame, CfiFormat::kDebugFrame}) {
      auto r = build(b, l, f);
      if (r.ok()) {
        Status v = validate_table(*r);
        ASSERT_TRUE(v.ok()) << "input " << i << ": " << v.error().message;
      } else {
        ASSERT_FALSE(r.error().message.empty());
      }
    }
  }
}

// ---- The cache file ----

UnwindTable sample_table() {
  CfiBuilder b;
  const size_t cie = b.cie();
  b.fde(cie, 0x401000, 0x3000, cat({advance2(0x1800), def_cfa_offset(16), offset(kRbp, 2)}));
  b.fde(cie, 0x405000, 0x20, def_cfa_expression(plt_expression(11)));
  auto t = build_unwind_table_from_cfi(b.section(), test_segments());
  EXPECT_TRUE(t.ok());
  return std::move(*t);
}

bool same_rows(const UnwindTable& a, const UnwindTable& b) {
  return a.pages == b.pages &&
         std::equal(a.rows.begin(), a.rows.end(), b.rows.begin(), b.rows.end(),
                    [](const lw_unwind_row& x, const lw_unwind_row& y) {
                      return memcmp(&x, &y, sizeof(x)) == 0;
                    });
}

// A cfi_identity() as the daemon stores it: 64 hex digits.
const std::string kIdentity(64, 'e');

TEST(UnwindCache, RoundTrip) {
  const UnwindTable t = sample_table();
  const std::string id = "0123456789abcdef0123456789abcdef01234567";
  const std::string bytes = serialize(t, id, kIdentity);
  auto back = parse_cached_table(bytes, id, kIdentity);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(same_rows(t, *back));
  EXPECT_EQ(back->stats.source, CfiSource::kEhFrame);
  EXPECT_EQ(back->stats.cfi.fdes, 2u);
  EXPECT_EQ(back->stats.rows_by_cfa_type, t.stats.rows_by_cfa_type);
  UnwindTable empty;
  auto e = parse_cached_table(serialize(empty, "", ""), "", "");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->rows.empty());
  EXPECT_EQ(serialize(t, std::string(300, 'a'), kIdentity), "");
  EXPECT_EQ(serialize(t, id, std::string(200, 'a')), "");
}

TEST(UnwindCache, RealLibraryRoundTrip) {
  auto libc = ElfFile::open_path("/lib/x86_64-linux-gnu/libc.so.6");
  if (!libc) GTEST_SKIP() << libc.error().message;
  auto t = build_unwind_table(**libc, nullptr);
  ASSERT_TRUE(t.ok());
  auto input = read_cfi_input(**libc, nullptr);
  ASSERT_TRUE(input.ok());
  const std::string identity = cfi_identity(*input);
  EXPECT_EQ(identity.size(), 64u);
  auto back = parse_cached_table(serialize(*t, (*libc)->build_id(), identity), (*libc)->build_id(), identity);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(same_rows(*t, *back));
}

TEST(UnwindCache, RefusesAnythingInconsistent) {
  const UnwindTable t = sample_table();
  const std::string id = "abcd";
  const std::string good = serialize(t, id, kIdentity);
  ASSERT_TRUE(parse_cached_table(good, id, kIdentity).ok());
  auto refused = [&](const std::string& bytes, const std::string& expected_id = "abcd") {
    return !parse_cached_table(bytes, expected_id, kIdentity).ok();
  };
  EXPECT_TRUE(refused(good, "abce"));
  EXPECT_TRUE(refused(good, ""));
  EXPECT_TRUE(refused(good.substr(0, good.size() - 1)));
  EXPECT_TRUE(refused(good + "x"));
  EXPECT_TRUE(refused(""));
  EXPECT_TRUE(refused(good.substr(0, 20)));
  // Any single byte changed: caught by the header checks or the checksum.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x5a);
    EXPECT_TRUE(refused(b)) << "byte " << i;
  }
  // Consistent checksums over inconsistent tables: validate_table decides.
  auto reserialized = [&](auto mutate) {
    UnwindTable bad = t;
    mutate(bad);
    return serialize(bad, id, kIdentity);
  };
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { std::swap(x.rows[0], x.rows[1]); })));
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { x.pages[1] = 1000; })));
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { x.pages.push_back(0); })));
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { x.pages.clear(); })));
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { x.rows.pop_back(); })));
  EXPECT_TRUE(refused(reserialized([](UnwindTable& x) { x.rows[0].cfa_type = 9; })));
  // Over the row limit, refused before anything is allocated for it.
  UnwindBuildLimits small;
  small.max_rows = 2;
  EXPECT_FALSE(parse_cached_table(good, id, kIdentity, small).ok());
  // A header that claims 2^32-1 rows in a short file.
  std::string huge = good;
  huge[32] = huge[33] = huge[34] = huge[35] = '\xff';
  EXPECT_TRUE(refused(huge));
}

// A sound cache file written for another file with the same build-id (its
// CFI identity differs) is refused as ESTALE, which the daemon counts as a
// mismatch (decision file-identity); damage stays EINVAL.
TEST(UnwindCache, AnotherFilesTableIsAMismatchNotATable) {
  const UnwindTable t = sample_table();
  const std::string id = "0123456789abcdef0123456789abcdef01234567";
  const std::string victim(64, 'a'), attacker(64, 'b');
  const std::string written_by_attacker = serialize(t, id, attacker);
  auto read = parse_cached_table(written_by_attacker, id, victim);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ESTALE) << read.error().message;
  auto other_id = parse_cached_table(written_by_attacker, "ffff", attacker);
  ASSERT_FALSE(other_id.ok());
  EXPECT_EQ(other_id.error().code, ESTALE);
  // No identity at all (what a build-id-only key would have matched).
  EXPECT_FALSE(parse_cached_table(serialize(t, id, ""), id, victim).ok());
  EXPECT_TRUE(parse_cached_table(written_by_attacker, id, attacker).ok());
  // Damage is not a mismatch.
  std::string damaged = written_by_attacker;
  damaged[damaged.size() - 1] ^= 1;
  auto bad = parse_cached_table(damaged, id, attacker);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, EINVAL);
  // A format-1 file (keyed by build-id alone) is not read.
  std::string v1 = written_by_attacker;
  v1[8] = 1;
  auto old = parse_cached_table(v1, id, attacker);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().code, EINVAL);
}

// The identity covers everything the table is compiled from, and nothing
// else: two inputs that differ in any of it differ.
TEST(CfiIdentity, ChangesWithEverythingTheTableIsBuiltFrom) {
  CfiInput base;
  base.bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  base.cfi.vaddr = 0x2000;
  base.cfi.text_vaddr = 0x1000;
  base.segments = {{0x1000, 0x800, 0x1000, 0x800, true}, {0, 0x1000, 0, 0x1000, false}};
  base.source_path = "/a";
  const std::string id = cfi_identity(base);
  ASSERT_EQ(id.size(), 64u);
  CfiInput same = base;
  same.source_path = "/elsewhere";  // where it came from is not what it is
  EXPECT_EQ(cfi_identity(same), id);
  std::vector<CfiInput> changed(7, base);
  changed[0].bytes[3] ^= 1;
  changed[1].bytes.push_back(0);
  changed[2].cfi.vaddr += 8;
  changed[3].cfi.text_vaddr.reset();
  changed[4].cfi.data_vaddr = 0x3000;
  changed[5].segments[0].offset += 0x1000;
  changed[6].cfi.format = CfiFormat::kDebugFrame;
  for (size_t i = 0; i < changed.size(); ++i) EXPECT_NE(cfi_identity(changed[i]), id) << "change " << i;
  // Same bytes, split otherwise between the section and the segments.
  CfiInput shifted = base;
  shifted.segments.pop_back();
  EXPECT_NE(cfi_identity(shifted), id);
}

// The table built from a file's input is the one build_unwind_table()
// builds from the file.
TEST(CfiIdentity, InputBuildsTheSameTableAsTheFile) {
  auto libc = ElfFile::open_path("/lib/x86_64-linux-gnu/libc.so.6");
  if (!libc) GTEST_SKIP() << libc.error().message;
  auto direct = build_unwind_table(**libc, nullptr);
  auto input = read_cfi_input(**libc, nullptr);
  ASSERT_TRUE(direct.ok() && input.ok());
  auto from_input = build_unwind_table(*input);
  ASSERT_TRUE(from_input.ok());
  EXPECT_TRUE(same_rows(*direct, *from_input));
  auto again = read_cfi_input(**libc, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cfi_identity(*input), cfi_identity(*again));
}

}  // namespace
}  // namespace lw
