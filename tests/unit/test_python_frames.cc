// SPDX-License-Identifier: Apache-2.0
// Python frames' pure parts (core/python_runtime.*, core/python_frames.*):
// the per-version table, glibc's thread-specific data offset, code objects
// and location tables decoded from bytes taken out of a real python3.11
// process (tests/unit/python/gen_py311_fixture.py), hostile input, the
// bounded cache, the mixed-stack merge and stack ids.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/config/config.h"
#include "core/symbols/python_frames.h"
#include "core/symbols/python_runtime.h"
#include "core/symbols/stack_id.h"
#include "exporter/metrics.h"
#include "view/json.h"
#include "tests/unit/python/py311_fixture.h"

namespace lw {
namespace {

// Memory made of (address, bytes) regions; a read must lie in one.
class FakeMemory : public TargetMemory {
 public:
  void add(uint64_t addr, std::vector<uint8_t> bytes) { regions_[addr] = std::move(bytes); }
  bool read(uint64_t addr, void* out, size_t len) override {
    ++reads;
    auto it = regions_.upper_bound(addr);
    if (it == regions_.begin()) return false;
    --it;
    const uint64_t off = addr - it->first;
    if (off > it->second.size() || len > it->second.size() - off) return false;
    memcpy(out, it->second.data() + off, len);
    return true;
  }
  std::map<uint64_t, std::vector<uint8_t>> regions_;
  int reads = 0;
};

FakeMemory fixture_memory() {
  FakeMemory m;
  for (const auto& r : py311::kRegions) m.add(r.addr, r.bytes);
  return m;
}

TEST(PythonRuntime, TablePinsEachVersionsOffsets) {
  const PythonLayout* l311 = python_layout(0x030b);
  ASSERT_NE(l311, nullptr);
  EXPECT_TRUE(l311->tested);
  EXPECT_EQ(l311->runtime_autotss, 592u);
  EXPECT_EQ(l311->ts_frame, 56);
  EXPECT_EQ(l311->cframe_frame, 8);
  EXPECT_EQ(l311->frame_code, 32);
  EXPECT_EQ(l311->frame_previous, 48);
  EXPECT_EQ(l311->frame_instr, 56);
  EXPECT_EQ(l311->frame_is_entry, 68);
  EXPECT_EQ(l311->frame_owner, 69);
  EXPECT_EQ(l311->owner_cstack, 0xff);
  EXPECT_EQ(l311->code_firstlineno, 72);
  EXPECT_EQ(l311->code_qualname, 128);
  EXPECT_EQ(l311->code_bytecode, 184);
  EXPECT_EQ(l311->unicode_ascii_data, 48);

  const PythonLayout* l312 = python_layout(0x030c);
  ASSERT_NE(l312, nullptr);
  EXPECT_FALSE(l312->tested);
  EXPECT_EQ(l312->runtime_autotss, 1544u);
  EXPECT_EQ(l312->ts_frame, 56);
  EXPECT_EQ(l312->cframe_frame, 0);
  EXPECT_EQ(l312->frame_code, 0);
  EXPECT_EQ(l312->frame_previous, 8);
  EXPECT_EQ(l312->frame_owner, 70);
  EXPECT_EQ(l312->frame_is_entry, LW_PY_OFF_NONE);
  EXPECT_EQ(l312->owner_cstack, 3);
  EXPECT_EQ(l312->code_firstlineno, 68);
  EXPECT_EQ(l312->code_bytecode, 192);
  EXPECT_EQ(l312->unicode_ascii_data, 40);
  EXPECT_EQ(l312->unicode_compact_data, 56);

  const PythonLayout* l313 = python_layout(0x030d);
  ASSERT_NE(l313, nullptr);
  EXPECT_FALSE(l313->tested);
  EXPECT_EQ(l313->runtime_autotss, 2160u);
  EXPECT_EQ(l313->ts_frame, 72);
  EXPECT_EQ(l313->cframe_frame, LW_PY_OFF_NONE);  // tstate->current_frame directly
  EXPECT_EQ(l313->frame_instr, 56);                // instr_ptr
  EXPECT_EQ(l313->code_bytecode, 200);

  // Every field the BPF side reads lies inside the header it reads.
  for (const PythonLayout* l : {l311, l312, l313}) {
    for (uint16_t off : {l->frame_code, l->frame_previous, l->frame_instr}) EXPECT_LE(off + 8, LW_PY_FRAME_HEADER);
    EXPECT_LT(l->frame_owner, LW_PY_FRAME_HEADER);
  }
  for (uint32_t v : {0x0308u, 0x0309u, 0x030au, 0x030eu}) EXPECT_EQ(python_layout(v), nullptr) << std::hex << v;
  EXPECT_STREQ(python_support_name(0x030b), "tested");
  EXPECT_STREQ(python_support_name(0x030c), "untested");
  EXPECT_STREQ(python_support_name(0x030d), "untested");
  EXPECT_STREQ(python_support_name(0x030a), "unsupported");
  EXPECT_EQ(python_version_name(0x030b), "3.11");
}

TEST(PythonRuntime, GlibcTsdOffsetFromPthreadGetspecific) {
  // Debian 12's glibc 2.36, pthread_getspecific's first bytes (objdump).
  const std::vector<uint8_t> glibc236 = {0x83, 0xff, 0x1f, 0x77, 0x3b, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x31, 0x48,
                                         0xc1, 0xe0, 0x04, 0x64, 0x48, 0x03, 0x04, 0x25, 0x10, 0x00, 0x00, 0x00};
  EXPECT_EQ(glibc_tsd_offset(glibc236), std::optional<uint32_t>(0x318));
  EXPECT_EQ(kGlibcTsdOffset, 0x318u);
  // musl's tss_get (a pointer in struct pthread, then an index): not glibc.
  const std::vector<uint8_t> musl = {0x64, 0x48, 0x8b, 0x04, 0x25, 0x00, 0x00, 0x00, 0x00, 0x48,
                                     0x8b, 0x80, 0x80, 0x00, 0x00, 0x00, 0x89, 0xff, 0x48, 0x8b};
  EXPECT_EQ(glibc_tsd_offset(musl), std::nullopt);
  EXPECT_EQ(glibc_tsd_offset({}), std::nullopt);
  std::vector<uint8_t> negative = glibc236;
  negative[10] = 0xf0;  // add $-16: not an offset into struct pthread
  EXPECT_EQ(glibc_tsd_offset(negative), std::nullopt);
}

TEST(PythonRuntime, ProcRecordForTheBpfSide) {
  const PythonLayout& l = *python_layout(0x030b);
  const lw_py_proc p = make_py_proc(l, 0x318, 0xa5b740);
  EXPECT_EQ(p.version, 0x030bu);
  EXPECT_EQ(p.tsd_key0, 0x318u);
  EXPECT_EQ(p.tss_addr, 0xa5b740u + 592);  // Debian's _PyRuntime + gilstate.autoTSSkey
  EXPECT_EQ(p.frame_is_entry, 68);
  EXPECT_EQ(p.owner_cstack, 0xff);
  const lw_py_proc p13 = make_py_proc(*python_layout(0x030d), 0x318, 0x1000);
  EXPECT_EQ(p13.tss_addr, 0x1000u + 2160);
  EXPECT_EQ(p13.cframe_frame, LW_PY_OFF_NONE);
}

TEST(PythonCode, DecodesRealCodeObjectsFromPython311) {
  FakeMemory mem = fixture_memory();
  const PythonLayout& l = *python_layout(0x030b);
  ASSERT_EQ(py311::kCodes.size(), 4u);
  for (const auto& want : py311::kCodes) {
    auto code = read_py_code(mem, l, want.addr, py311::kCodeType, static_cast<uint16_t>(want.firstlineno));
    ASSERT_TRUE(code.has_value()) << want.qualname;
    EXPECT_EQ(code->qualname, want.qualname);
    EXPECT_EQ(code->name, want.name);
    EXPECT_EQ(code->filename, want.filename);
    EXPECT_EQ(code->firstlineno, want.firstlineno);
    EXPECT_EQ(code->code_units, want.lines.size());
    // Every instruction's line as the interpreter's co_positions() gives it.
    for (size_t i = 0; i < want.lines.size(); ++i)
      EXPECT_EQ(read_py_line(mem, *code, static_cast<int>(i * 2)), want.lines[i])
          << want.qualname << " at byte " << i * 2;
    // Not started yet (prev_instr before the first instruction).
    EXPECT_EQ(read_py_line(mem, *code, -2), want.firstlineno);
    // Past the end: no line.
    EXPECT_EQ(read_py_line(mem, *code, static_cast<int>(want.lines.size() * 2)), 0);
  }
}

TEST(PythonCode, RefusesWhatIsNotTheCodeObjectBpfSaw) {
  FakeMemory mem = fixture_memory();
  const PythonLayout& l = *python_layout(0x030b);
  const auto& c = py311::kCodes[0];
  // Another type at that address (freed, reused by another object).
  EXPECT_FALSE(read_py_code(mem, l, c.addr, py311::kCodeType + 16, std::nullopt).has_value());
  // Another code object at that address (its first line differs).
  EXPECT_FALSE(read_py_code(mem, l, c.addr, py311::kCodeType, static_cast<uint16_t>(c.firstlineno + 1)).has_value());
  // Unmapped, misaligned, null.
  EXPECT_FALSE(read_py_code(mem, l, 0x1000, 0, std::nullopt).has_value());
  EXPECT_FALSE(read_py_code(mem, l, c.addr + 1, 0, std::nullopt).has_value());
  EXPECT_FALSE(read_py_code(mem, l, 0, 0, std::nullopt).has_value());
}

TEST(PythonCode, HostileStringsAndTablesAreBounded) {
  const PythonLayout& l = *python_layout(0x030b);
  FakeMemory mem;
  // A str claiming 2^40 ASCII characters: read at most kPyMaxStringChars.
  std::vector<uint8_t> huge(48 + kPyMaxStringChars, 'a');
  const int64_t length = int64_t{1} << 40;
  memcpy(huge.data() + 16, &length, 8);
  const uint32_t ascii_compact = (1u << 2) | (1u << 5) | (1u << 6);
  memcpy(huge.data() + 32, &ascii_compact, 4);
  mem.add(0x10000, huge);
  auto s = read_py_unicode(mem, l, 0x10000);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->size(), kPyMaxStringChars);
  // Negative length, a non-compact (legacy) string, a bad kind.
  std::vector<uint8_t> bad(80, 0);
  const int64_t minus = -5;
  memcpy(bad.data() + 16, &minus, 8);
  memcpy(bad.data() + 32, &ascii_compact, 4);
  mem.add(0x20000, bad);
  EXPECT_FALSE(read_py_unicode(mem, l, 0x20000).has_value());
  std::vector<uint8_t> legacy(80, 0);
  const uint32_t not_compact = 1u << 2;
  memcpy(legacy.data() + 32, &not_compact, 4);
  mem.add(0x30000, legacy);
  EXPECT_FALSE(read_py_unicode(mem, l, 0x30000).has_value());
  std::vector<uint8_t> kind3(80, 0);
  const uint32_t bad_kind = (3u << 2) | (1u << 5);
  const int64_t one = 1;
  memcpy(kind3.data() + 16, &one, 8);
  memcpy(kind3.data() + 32, &bad_kind, 4);
  mem.add(0x40000, kind3);
  EXPECT_FALSE(read_py_unicode(mem, l, 0x40000).has_value());
  // Location tables: a byte without the entry bit, truncated varints, an
  // endless varint: line 0, never a crash or a loop past the table.
  EXPECT_EQ(py_line_for_offset(std::string("\x01\x02", 2), 10, 0), 0);
  EXPECT_EQ(py_line_for_offset(std::string("\xf0", 1), 10, 0), 0);           // long form, no operands
  EXPECT_EQ(py_line_for_offset(std::string("\xe8\x7f\x7f\x7f", 4), 10, 0), 0);  // no-column, endless varint
  EXPECT_EQ(py_line_for_offset(std::string(), 10, 0), 0);
  // One-line and no-column forms as the compiler writes them.
  EXPECT_EQ(py_line_for_offset(std::string("\xd8\x01\x02", 3), 10, 0), 11);     // one-line, delta 1, 1 unit
  EXPECT_EQ(py_line_for_offset(std::string("\xe8\x05", 2), 10, 0), 8);          // no-column, delta -2
  EXPECT_EQ(py_line_for_offset(std::string("\xe8\x05\xf8", 3), 10, 2), 0);      // then "no location"
}

TEST(PythonCode, CacheKeepsWhatTheTargetFreedAndRereadsAReusedAddress) {
  FakeMemory mem = fixture_memory();
  const PythonLayout& l = *python_layout(0x030b);
  const auto& c = py311::kCodes[0];
  PythonCodeCache cache(2);
  const PythonCode* got = cache.get(mem, l, c.addr, py311::kCodeType, static_cast<uint16_t>(c.firstlineno));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->qualname, "handler");
  // The target frees the code object: the cache still answers, no read.
  FakeMemory empty;
  got = cache.get(empty, l, c.addr, py311::kCodeType, static_cast<uint16_t>(c.firstlineno));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->qualname, "handler");
  EXPECT_EQ(empty.reads, 0);
  // Another code object at the same address (another first line): read
  // again, and refused when memory holds something else.
  EXPECT_EQ(cache.get(empty, l, c.addr, py311::kCodeType, static_cast<uint16_t>(c.firstlineno + 7)), nullptr);
  EXPECT_EQ(cache.failures(), 1u);
  // Bounded: the least recently used goes.
  for (const auto& other : py311::kCodes)
    EXPECT_NE(cache.get(mem, l, other.addr, py311::kCodeType, static_cast<uint16_t>(other.firstlineno)), nullptr);
  EXPECT_EQ(cache.size(), 2u);
}

// Counts the bytes read, as process_vm_readv would move them.
class CountingMemory : public FakeMemory {
 public:
  bool read(uint64_t addr, void* out, size_t len) override {
    bytes_read += len;
    return FakeMemory::read(addr, out, len);
  }
  uint64_t bytes_read = 0;
};

// Issue 32: a fake CPython whose 600 code objects share one 1 MiB location
// table took the daemon from 60 to 715 MiB, each cached object holding a
// copy of the table. Lines are now read per instruction, from the part of
// the table that can hold it, and cached per (code object, instruction).
TEST(PythonCode, CodeObjectsSharingAHugeLineTableCostNoCopies) {
  const PythonLayout& l = *python_layout(0x030b);
  constexpr uint64_t kType = 0x7000, kName = 0x10000, kTable = 0x20000, kCodes = 0x1000000;
  constexpr size_t kTableBytes = kPyMaxLinetableBytes, kObjects = 600;
  CountingMemory mem;
  std::vector<uint8_t> name(64, 0);  // "f": compact ASCII
  const int64_t one = 1;
  const uint32_t compact_ascii = 0x60;
  memcpy(name.data() + l.unicode_length, &one, 8);
  memcpy(name.data() + l.unicode_state, &compact_ascii, 4);
  name[l.unicode_ascii_data] = 'f';
  mem.add(kName, name);
  // One-line entries (code 11: line + 1, one code unit, two column bytes).
  std::vector<uint8_t> table(l.bytes_data + kTableBytes, 0);
  const int64_t table_len = kTableBytes;
  memcpy(table.data() + l.bytes_size, &table_len, 8);
  for (size_t i = 0; i + 3 <= kTableBytes; i += 3) table[l.bytes_data + i] = 0xd8;
  mem.add(kTable, table);
  const int64_t units = kTableBytes / 3;
  const int32_t firstlineno = 10;
  for (size_t i = 0; i < kObjects; ++i) {
    std::vector<uint8_t> code(l.code_bytecode, 0);
    memcpy(code.data() + 8, &kType, 8);
    memcpy(code.data() + l.code_size, &units, 8);
    memcpy(code.data() + l.code_firstlineno, &firstlineno, 4);
    for (uint16_t off : {l.code_filename, l.code_name, l.code_qualname}) memcpy(code.data() + off, &kName, 8);
    memcpy(code.data() + l.code_linetable, &kTable, 8);
    mem.add(kCodes + i * 4096, code);
  }
  const uint64_t setup_reads = mem.bytes_read;
  PythonCodeCache cache;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kObjects; ++i) {
      const int lasti = static_cast<int>(i % 50) * 2;
      Frame f = cache.frame(mem, l, kCodes + i * 4096, kType, firstlineno, lasti);
      ASSERT_EQ(f.function, "f");
      EXPECT_EQ(f.line, firstlineno + lasti / 2 + 1) << i;
    }
  }
  EXPECT_EQ(cache.size(), kObjects);
  // The old cache held 600 copies of the table (600 MiB) and read each whole.
  EXPECT_LT(cache.bytes(), 1u << 20) << cache.bytes();
  EXPECT_LT(mem.bytes_read - setup_reads, 2u << 20) << mem.bytes_read - setup_reads;
  EXPECT_EQ(cache.lines(), kObjects);  // the second round read nothing
  // Bounded whatever the target says: lines are dropped when full.
  PythonCodeCache small(4, 8);
  for (int lasti = 0; lasti < 40; lasti += 2) (void)small.frame(mem, l, kCodes, kType, firstlineno, lasti);
  EXPECT_LE(small.lines(), 8u);
}

Frame native(const std::string& fn) {
  Frame f;
  f.function = fn;
  f.module = "/usr/bin/python3.11";
  return f;
}

Frame py(const std::string& fn, int line) {
  Frame f;
  f.language = "python";
  f.function = fn;
  f.file = "/srv/app.py";
  f.line = line;
  return f;
}

std::vector<std::string> names(const std::vector<Frame>& frames) {
  std::vector<std::string> out;
  for (const Frame& f : frames) out.push_back((f.language == "python" ? "py:" : "") + f.function);
  return out;
}

TEST(PythonStack, EachEvaluationFrameTakesFramesUpToItsEntryFrame) {
  // alloc_cpu <- empty_cpu <- eval (inner) <- PyObject_Call <- eval (outer) <- main
  const std::vector<Frame> nat = {native("alloc_cpu"), native("empty_cpu"), native("_PyEval_EvalFrameDefault"),
                                  native("PyObject_Call"), native("_PyEval_EvalFrameDefault"), native("main")};
  const std::vector<bool> is_eval = {false, false, true, false, true, false};
  const std::vector<Frame> python = {py("forward", 10), py("step", 20), py("handler", 30), py("<module>", 40)};
  const std::vector<bool> entry = {false, true, false, true};
  EXPECT_EQ(names(merge_python_frames(nat, is_eval, python, entry)),
            (std::vector<std::string>{"alloc_cpu", "empty_cpu", "py:forward", "py:step", "PyObject_Call",
                                      "py:handler", "py:<module>", "main"}));
  // Python frames left when the native stack was cut go after it.
  EXPECT_EQ(names(merge_python_frames({nat[0], nat[1]}, {false, false}, python, entry)),
            (std::vector<std::string>{"alloc_cpu", "empty_cpu", "py:forward", "py:step", "py:handler",
                                      "py:<module>"}));
  // More evaluation frames than Python groups (the chain was cut at its
  // depth): the outer ones stay native.
  EXPECT_EQ(names(merge_python_frames(nat, is_eval, {py("forward", 10)}, {true})),
            (std::vector<std::string>{"alloc_cpu", "empty_cpu", "py:forward", "PyObject_Call",
                                      "_PyEval_EvalFrameDefault", "main"}));
  // No entry flag at all (a missing is_entry): one group takes them all.
  EXPECT_EQ(names(merge_python_frames(nat, is_eval, python, {false, false, false, false})).size(), 9u);
  const std::vector<Frame> merged = merge_python_frames(nat, is_eval, python, entry);
  ASSERT_NE(innermost_python_frame(merged), nullptr);
  EXPECT_EQ(innermost_python_frame(merged)->function, "forward");
  EXPECT_EQ(innermost_python_frame(nat), nullptr);
}

TEST(PythonStack, StackIdsUseFileQualnameAndLineNotAddresses) {
  std::vector<Frame> a = {native("alloc"), py("handler", 42)};
  std::vector<Frame> b = a;
  a[1].offset = 0x10;  // another instruction on the same line, another process's code address
  b[1].offset = 0x99;
  EXPECT_EQ(stable_stack_id(a), stable_stack_id(b));
  b[1].line = 43;
  EXPECT_NE(stable_stack_id(a), stable_stack_id(b));
  b = a;
  b[1].function = "Other.handler";
  EXPECT_NE(stable_stack_id(a), stable_stack_id(b));
  b = a;
  b[1].file = "/srv/other.py";
  EXPECT_NE(stable_stack_id(a), stable_stack_id(b));
}

TEST(PythonStack, FrameFromCodeAndInstruction) {
  FakeMemory mem = fixture_memory();
  const auto& c = py311::kCodes[3];  // far_below: line 322, more than 255 below the start
  auto code = read_py_code(mem, *python_layout(0x030b), c.addr, py311::kCodeType, std::nullopt);
  ASSERT_TRUE(code.has_value());
  Frame f = python_frame(&*code, 2, read_py_line(mem, *code, 2));
  EXPECT_EQ(f.language, "python");
  EXPECT_EQ(f.function, "far_below");
  EXPECT_EQ(f.file, "/srv/app/handlers.py");
  EXPECT_EQ(f.line, c.lines[1]);
  Frame unreadable = python_frame(nullptr, 4, 0);
  EXPECT_EQ(unreadable.language, "python");
  EXPECT_EQ(unreadable.line, 0);
  EXPECT_FALSE(unreadable.function.empty());
}

// The per-site metrics' `site` label names the innermost Python frame (the
// function that keeps the memory), and the JSON marks each frame's language.
TEST(PythonStack, SiteLabelAndJson) {
  DaemonSnapshot snap;
  snap.timestamp = 1.8e9;
  snap.max_processes = 4;
  ProcessEntry e;
  e.process.identity.pid = 77;
  e.process.identity.start_time = 1;
  e.process.identity.comm = "python3.11";
  e.process.target = "t";
  e.process.mode = TargetMode::kFull;
  SiteSnapshot site;
  site.stack_id = 0x42;
  site.kind = LW_KIND_HEAP;
  site.live_bytes = 100;
  site.live_allocations = 1;
  site.frames = {native("_PyBytes_FromSize"), py("remember", 7), py("handle_request", 11)};
  e.snapshot.sites.push_back(site);
  e.snapshot.kinds[LW_KIND_HEAP].live_bytes = 100;
  e.snapshot.kinds[LW_KIND_HEAP].live_allocations = 1;
  e.snapshot.live_bytes = 100;
  e.snapshot.python.present = true;
  e.snapshot.python.version = "3.11.2";
  e.snapshot.python.support = "tested";
  e.snapshot.python.frames = true;
  snap.processes.push_back(e);
  const std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("site=\"remember (app.py:7)\""), std::string::npos) << text;
  const nlohmann::json j = to_json(e.snapshot);
  EXPECT_EQ(j["sites"][0]["frames"][0]["language"], "native");
  EXPECT_EQ(j["sites"][0]["frames"][1]["language"], "python");
  EXPECT_EQ(j["sites"][0]["frames"][1]["file"], "/srv/app.py");
  EXPECT_EQ(j["python"]["version"], "3.11.2");
  EXPECT_EQ(j["python"]["support"], "tested");
  EXPECT_TRUE(j["python"]["frames"].get<bool>());
  ProcessSnapshot none;
  EXPECT_TRUE(to_json(none)["python"].is_null());
}

}  // namespace
}  // namespace lw

namespace lw {
namespace {

TEST(PythonConfig, PythonFramesKey) {
  std::vector<ConfigError> errors;
  Result<Config> on = parse_config("unwind: {}\n", "t.yaml", &errors);
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->unwind.python_frames);
  Result<Config> off = parse_config("unwind:\n  python_frames: false\n", "t.yaml", &errors);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->unwind.python_frames);
  errors.clear();
  Result<Config> bad = parse_config("unwind:\n  python_frames: sometimes\n", "t.yaml", &errors);
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(errors.empty());
}

}  // namespace
}  // namespace lw
