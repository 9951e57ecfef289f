// SPDX-License-Identifier: Apache-2.0
#include "core/formats/pprof.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lw {
namespace {

// ---- A minimal protobuf reader, independent of the encoder under test. ----

struct WireField {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;     // wire type 0
  std::string_view bytes;  // wire type 2
};

bool read_varint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) return false;
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Splits one message into its fields; nullopt on malformed input. Only the
// wire types profile.proto uses (varint, length-delimited) are accepted.
std::optional<std::vector<WireField>> parse_message(std::string_view in) {
  std::vector<WireField> fields;
  while (!in.empty()) {
    uint64_t tag = 0;
    if (!read_varint(in, tag)) return std::nullopt;
    WireField f;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.number == 0) return std::nullopt;
    if (f.wire == 0) {
      if (!read_varint(in, f.varint)) return std::nullopt;
    } else if (f.wire == 2) {
      uint64_t len = 0;
      if (!read_varint(in, len) || len > in.size()) return std::nullopt;
      f.bytes = in.substr(0, len);
      in.remove_prefix(len);
    } else {
      return std::nullopt;
    }
    fields.push_back(f);
  }
  return fields;
}

// Repeated scalars may come packed (wire 2) or one by one (wire 0).
bool append_repeated(const WireField& f, std::vector<uint64_t>& out) {
  if (f.wire == 0) {
    out.push_back(f.varint);
    return true;
  }
  std::string_view in = f.bytes;
  while (!in.empty()) {
    uint64_t v = 0;
    if (!read_varint(in, v)) return false;
    out.push_back(v);
  }
  return true;
}

struct ValueType {
  int64_t type = 0, unit = 0;
};
struct Label {
  int64_t key = 0, str = 0, num = 0, num_unit = 0;
};
struct Sample {
  std::vector<uint64_t> location_ids;
  std::vector<uint64_t> values;  // int64 on the wire; ours are never negative
  std::vector<Label> labels;
};
struct Mapping {
  uint64_t id = 0, memory_start = 0, memory_limit = 0, file_offset = 0;
  int64_t filename = 0, build_id = 0;
  bool has_functions = false, has_filenames = false, has_line_numbers = false,
       has_inline_frames = false;
};
struct Line {
  uint64_t function_id = 0;
  int64_t line = 0;
};
struct Location {
  uint64_t id = 0, mapping_id = 0, address = 0;
  std::vector<Line> lines;
  bool is_folded = false;
};
struct Function {
  uint64_t id = 0;
  int64_t name = 0, system_name = 0, filename = 0, start_line = 0;
};
struct Profile {
  std::vector<ValueType> sample_types;
  std::vector<Sample> samples;
  std::vector<Mapping> mappings;
  std::vector<Location> locations;
  std::vector<Function> functions;
  std::vector<std::string> strings;
  int64_t time_nanos = 0, duration_nanos = 0, period = 0, default_sample_type = 0;
  std::optional<ValueType> period_type;
  std::vector<uint64_t> comments;

  const std::string& str(int64_t i) const { return strings.at(static_cast<size_t>(i)); }
  const Function& function(uint64_t id) const { return functions.at(id - 1); }
  const Location& location(uint64_t id) const { return locations.at(id - 1); }
  const Mapping& mapping(uint64_t id) const { return mappings.at(id - 1); }

  // Leaf-first function names of a sample; "?" for a location without lines.
  std::vector<std::string> stack(const Sample& s) const {
    std::vector<std::string> names;
    for (uint64_t id : s.location_ids) {
      const Location& loc = location(id);
      names.push_back(loc.lines.empty() ? "?" : str(function(loc.lines[0].function_id).name));
    }
    return names;
  }
};

std::optional<ValueType> decode_value_type(std::string_view in) {
  auto fields = parse_message(in);
  if (!fields) return std::nullopt;
  ValueType v;
  for (const WireField& f : *fields) {
    if (f.number == 1) v.type = static_cast<int64_t>(f.varint);
    if (f.number == 2) v.unit = static_cast<int64_t>(f.varint);
  }
  return v;
}

// Decodes a Profile and checks pprof's referential rules on the way: ids are
// 1..n in order, every reference resolves, string indices are in range.
std::optional<Profile> decode_profile(std::string_view data) {
  auto fields = parse_message(data);
  if (!fields) return std::nullopt;
  Profile p;
  for (const WireField& f : *fields) {
    switch (f.number) {
      case 1:
      case 11: {
        auto v = decode_value_type(f.bytes);
        if (!v) return std::nullopt;
        if (f.number == 1) {
          p.sample_types.push_back(*v);
        } else {
          p.period_type = v;
        }
        break;
      }
      case 2: {
        auto sub = parse_message(f.bytes);
        if (!sub) return std::nullopt;
        Sample s;
        for (const WireField& g : *sub) {
          if (g.number == 1 && !append_repeated(g, s.location_ids)) return std::nullopt;
          if (g.number == 2 && !append_repeated(g, s.values)) return std::nullopt;
          if (g.number == 3) {
            auto lf = parse_message(g.bytes);
            if (!lf) return std::nullopt;
            Label l;
            for (const WireField& h : *lf) {
              const auto v = static_cast<int64_t>(h.varint);
              if (h.number == 1) l.key = v;
              if (h.number == 2) l.str = v;
              if (h.number == 3) l.num = v;
              if (h.number == 4) l.num_unit = v;
            }
            s.labels.push_back(l);
          }
        }
        p.samples.push_back(std::move(s));
        break;
      }
      case 3: {
        auto sub = parse_message(f.bytes);
        if (!sub) return std::nullopt;
        Mapping m;
        for (const WireField& g : *sub) {
          switch (g.number) {
            case 1: m.id = g.varint; break;
            case 2: m.memory_start = g.varint; break;
            case 3: m.memory_limit = g.varint; break;
            case 4: m.file_offset = g.varint; break;
            case 5: m.filename = static_cast<int64_t>(g.varint); break;
            case 6: m.build_id = static_cast<int64_t>(g.varint); break;
            case 7: m.has_functions = g.varint != 0; break;
            case 8: m.has_filenames = g.varint != 0; break;
            case 9: m.has_line_numbers = g.varint != 0; break;
            case 10: m.has_inline_frames = g.varint != 0; break;
          }
        }
        p.mappings.push_back(m);
        break;
      }
      case 4: {
        auto sub = parse_message(f.bytes);
        if (!sub) return std::nullopt;
        Location loc;
        for (const WireField& g : *sub) {
          if (g.number == 1) loc.id = g.varint;
          if (g.number == 2) loc.mapping_id = g.varint;
          if (g.number == 3) loc.address = g.varint;
          if (g.number == 5) loc.is_folded = g.varint != 0;
          if (g.number == 4) {
            auto lf = parse_message(g.bytes);
            if (!lf) return std::nullopt;
            Line line;
            for (const WireField& h : *lf) {
              if (h.number == 1) line.function_id = h.varint;
              if (h.number == 2) line.line = static_cast<int64_t>(h.varint);
            }
            loc.lines.push_back(line);
          }
        }
        p.locations.push_back(std::move(loc));
        break;
      }
      case 5: {
        auto sub = parse_message(f.bytes);
        if (!sub) return std::nullopt;
        Function fn;
        for (const WireField& g : *sub) {
          const auto v = static_cast<int64_t>(g.varint);
          if (g.number == 1) fn.id = g.varint;
          if (g.number == 2) fn.name = v;
          if (g.number == 3) fn.system_name = v;
          if (g.number == 4) fn.filename = v;
          if (g.number == 5) fn.start_line = v;
        }
        p.functions.push_back(fn);
        break;
      }
      case 6: p.strings.emplace_back(f.bytes); break;
      case 9: p.time_nanos = static_cast<int64_t>(f.varint); break;
      case 10: p.duration_nanos = static_cast<int64_t>(f.varint); break;
      case 12: p.period = static_cast<int64_t>(f.varint); break;
      case 13:
        if (!append_repeated(f, p.comments)) return std::nullopt;
        break;
      case 14: p.default_sample_type = static_cast<int64_t>(f.varint); break;
      default: return std::nullopt;  // fields 7, 8 (drop/keep frames) are never written
    }
  }

  // Referential checks, as pprof's CheckValid does.
  if (p.strings.empty() || !p.strings[0].empty()) return std::nullopt;
  const auto n_strings = static_cast<int64_t>(p.strings.size());
  auto bad_str = [&](int64_t i) { return i < 0 || i >= n_strings; };
  for (size_t i = 0; i < p.mappings.size(); ++i) {
    const Mapping& m = p.mappings[i];
    if (m.id != i + 1 || bad_str(m.filename) || bad_str(m.build_id)) return std::nullopt;
  }
  for (size_t i = 0; i < p.functions.size(); ++i) {
    const Function& fn = p.functions[i];
    if (fn.id != i + 1 || bad_str(fn.name) || bad_str(fn.system_name) || bad_str(fn.filename)) {
      return std::nullopt;
    }
  }
  for (size_t i = 0; i < p.locations.size(); ++i) {
    const Location& loc = p.locations[i];
    if (loc.id != i + 1 || loc.mapping_id > p.mappings.size()) return std::nullopt;
    for (const Line& l : loc.lines) {
      if (l.function_id == 0 || l.function_id > p.functions.size()) return std::nullopt;
    }
  }
  for (const Sample& s : p.samples) {
    if (s.values.size() != p.sample_types.size()) return std::nullopt;
    for (uint64_t id : s.location_ids) {
      if (id == 0 || id > p.locations.size()) return std::nullopt;
    }
    for (const Label& l : s.labels) {
      if (bad_str(l.key) || bad_str(l.str)) return std::nullopt;
    }
  }
  for (const ValueType& v : p.sample_types) {
    if (bad_str(v.type) || bad_str(v.unit)) return std::nullopt;
  }
  for (uint64_t c : p.comments) {
    if (bad_str(static_cast<int64_t>(c))) return std::nullopt;
  }
  if (bad_str(p.default_sample_type)) return std::nullopt;
  return p;
}

Profile decode_or_fail(const std::string& data) {
  auto p = decode_profile(data);
  EXPECT_TRUE(p.has_value()) << "output is not a valid Profile";
  return p.value_or(Profile{});
}

std::string gunzip(std::string_view data) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);  // + 16: gzip wrapper only
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  EXPECT_EQ(zs.avail_in, 0u) << "trailing bytes after the gzip stream";
  inflateEnd(&zs);
  return out;
}

Frame frame(std::string function, std::string file, int line, std::string module,
            uint64_t offset, std::string build_id = "") {
  Frame f;
  f.function = std::move(function);
  f.file = std::move(file);
  f.line = line;
  f.module = std::move(module);
  f.build_id = std::move(build_id);
  f.offset = offset;
  return f;
}

PprofSite site(std::vector<Frame> frames, std::string kind, uint64_t inuse_bytes,
               uint64_t inuse_objects, uint64_t alloc_bytes, uint64_t alloc_objects) {
  PprofSite s;
  s.frames = std::move(frames);
  s.kind = std::move(kind);
  s.inuse_bytes = inuse_bytes;
  s.inuse_objects = inuse_objects;
  s.alloc_bytes = alloc_bytes;
  s.alloc_objects = alloc_objects;
  return s;
}

constexpr char kApp[] = "/usr/bin/app";
constexpr char kLibc[] = "/usr/lib/x86_64-linux-gnu/libc.so.6";

// Two heap sites sharing their caller, one mmap site through libc, one
// unsymbolized frame. Values are distinct powers so mix-ups show.
PprofInput sample_input() {
  PprofInput in;
  const Frame main_frame = frame("main", "/src/app/main.cc", 40, kApp, 0x1500, "abcdef01");
  in.sites.push_back(site({frame("leak_big", "/src/app/leak.cc", 12, kApp, 0x1200, "abcdef01"),
                           main_frame},
                          "heap", 3 << 20, 3, 5 << 20, 5));
  in.sites.push_back(site({frame("leak_small", "/src/app/leak.cc", 20, kApp, 0x1300, "abcdef01"),
                           main_frame},
                          "heap", 1 << 20, 1, 1 << 20, 1));
  in.sites.push_back(site({frame("mmap", "", 0, kLibc, 0x11a000), main_frame}, "mmap", 512 << 10,
                          1, 512 << 10, 1));
  in.mappings.push_back({0x555555554000, 0x555555559000, 0x1000, kApp, ""});
  in.time_nanos = 1700000000123456789;
  in.duration_nanos = 10'000'000'000;
  in.comment = "leakwatch test profile";
  return in;
}

TEST(Pprof, EmptyInputIsAValidProfile) {
  const Profile p = decode_or_fail(encode_pprof(PprofInput{}));
  EXPECT_EQ(p.strings.at(0), "");
  ASSERT_EQ(p.sample_types.size(), 4u);
  const std::pair<const char*, const char*> expected[] = {
      {"inuse_objects", "count"}, {"inuse_space", "bytes"}, {"alloc_objects", "count"},
      {"alloc_space", "bytes"}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p.str(p.sample_types[i].type), expected[i].first);
    EXPECT_EQ(p.str(p.sample_types[i].unit), expected[i].second);
  }
  EXPECT_EQ(p.str(p.default_sample_type), "inuse_space");
  ASSERT_TRUE(p.period_type.has_value());
  EXPECT_EQ(p.str(p.period_type->type), "space");
  EXPECT_EQ(p.str(p.period_type->unit), "bytes");
  EXPECT_EQ(p.period, 1);  // unsampled: every allocation counted, as Go's MemProfileRate=1
  EXPECT_TRUE(p.samples.empty());
  EXPECT_TRUE(p.mappings.empty());
  EXPECT_TRUE(p.locations.empty());
  EXPECT_TRUE(p.functions.empty());
  EXPECT_TRUE(p.comments.empty());
}

TEST(Pprof, SamplesCarryValuesStacksAndKind) {
  const PprofInput in = sample_input();
  const Profile p = decode_or_fail(encode_pprof(in));
  ASSERT_EQ(p.samples.size(), 3u);

  EXPECT_EQ(p.stack(p.samples[0]), (std::vector<std::string>{"leak_big", "main"}));
  EXPECT_EQ(p.stack(p.samples[1]), (std::vector<std::string>{"leak_small", "main"}));
  EXPECT_EQ(p.stack(p.samples[2]), (std::vector<std::string>{"mmap", "main"}));
  // inuse_objects, inuse_space, alloc_objects, alloc_space.
  EXPECT_EQ(p.samples[0].values, (std::vector<uint64_t>{3, 3 << 20, 5, 5 << 20}));
  EXPECT_EQ(p.samples[2].values, (std::vector<uint64_t>{1, 512 << 10, 1, 512 << 10}));

  const char* kinds[] = {"heap", "heap", "mmap"};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(p.samples[i].labels.size(), 1u);
    EXPECT_EQ(p.str(p.samples[i].labels[0].key), "kind");
    EXPECT_EQ(p.str(p.samples[i].labels[0].str), kinds[i]);
  }

  EXPECT_EQ(p.time_nanos, in.time_nanos);
  EXPECT_EQ(p.duration_nanos, in.duration_nanos);
  ASSERT_EQ(p.comments.size(), 1u);
  EXPECT_EQ(p.str(static_cast<int64_t>(p.comments[0])), "leakwatch test profile");
}

TEST(Pprof, FunctionsCarryFileAndLine) {
  const Profile p = decode_or_fail(encode_pprof(sample_input()));
  const Location& leaf = p.location(p.samples[0].location_ids[0]);
  ASSERT_EQ(leaf.lines.size(), 1u);
  EXPECT_EQ(leaf.lines[0].line, 12);
  const Function& fn = p.function(leaf.lines[0].function_id);
  EXPECT_EQ(p.str(fn.name), "leak_big");
  EXPECT_EQ(p.str(fn.system_name), "leak_big");
  EXPECT_EQ(p.str(fn.filename), "/src/app/leak.cc");

  const Location& mmap_leaf = p.location(p.samples[2].location_ids[0]);
  ASSERT_EQ(mmap_leaf.lines.size(), 1u);
  EXPECT_EQ(mmap_leaf.lines[0].line, 0);  // unknown stays 0
  EXPECT_EQ(p.str(p.function(mmap_leaf.lines[0].function_id).filename), "");
}

TEST(Pprof, DedupesLocationsFunctionsAndStrings) {
  PprofInput in = sample_input();
  // Same function and file at another offset: a second location, one function.
  in.sites.push_back(site({frame("leak_big", "/src/app/leak.cc", 14, kApp, 0x1210),
                           frame("main", "/src/app/main.cc", 40, kApp, 0x1500)},
                          "heap", 1, 1, 1, 1));
  const Profile p = decode_or_fail(encode_pprof(in));
  // leak_big x2, leak_small, mmap, main (shared by all four sites).
  EXPECT_EQ(p.locations.size(), 5u);
  EXPECT_EQ(p.functions.size(), 4u);
  for (const Sample& s : p.samples) {
    EXPECT_EQ(s.location_ids.back(), p.samples[0].location_ids.back());
  }
  EXPECT_EQ(p.location(p.samples[3].location_ids[0]).lines[0].function_id,
            p.location(p.samples[0].location_ids[0]).lines[0].function_id);
  for (size_t i = 0; i < p.strings.size(); ++i) {
    for (size_t j = i + 1; j < p.strings.size(); ++j) {
      EXPECT_NE(p.strings[i], p.strings[j]) << "string " << i << " and " << j;
    }
  }
}

TEST(Pprof, RealMappingGivesRealAddresses) {
  const PprofInput in = sample_input();
  const Profile p = decode_or_fail(encode_pprof(in));
  const Location& leaf = p.location(p.samples[0].location_ids[0]);
  const Mapping& m = p.mapping(leaf.mapping_id);
  EXPECT_EQ(m.id, 1u);  // given mappings keep their order and come first
  EXPECT_EQ(p.str(m.filename), kApp);
  EXPECT_EQ(m.memory_start, 0x555555554000u);
  EXPECT_EQ(m.memory_limit, 0x555555559000u);
  EXPECT_EQ(m.file_offset, 0x1000u);
  EXPECT_EQ(leaf.address, 0x555555554000u + 0x1200 - 0x1000);
  // The PprofMapping had no build-id; a frame of that module did.
  EXPECT_EQ(p.str(m.build_id), "abcdef01");
  EXPECT_TRUE(m.has_functions);
  EXPECT_TRUE(m.has_filenames);
  EXPECT_TRUE(m.has_line_numbers);
  EXPECT_FALSE(m.has_inline_frames);
}

TEST(Pprof, ModulesWithoutMappingGetDisjointSyntheticRanges) {
  PprofInput in = sample_input();
  // A real mapping at 0 forces the synthetic ones above it.
  in.mappings.push_back({0, 0x200000, 0, "/opt/other.so", ""});
  // kApp offset outside its real mapping: the app also needs a synthetic range.
  in.sites.push_back(
      site({frame("cold", "/src/app/cold.cc", 7, kApp, 0x9000)}, "heap", 1, 1, 1, 1));
  const Profile p = decode_or_fail(encode_pprof(in));

  const Location& libc_leaf = p.location(p.samples[2].location_ids[0]);
  const Mapping& libc = p.mapping(libc_leaf.mapping_id);
  EXPECT_EQ(p.str(libc.filename), kLibc);
  EXPECT_EQ(libc.file_offset, 0u);
  EXPECT_EQ(libc_leaf.address - libc.memory_start, 0x11a000u);  // offset survives
  EXPECT_TRUE(libc.has_functions);
  EXPECT_FALSE(libc.has_filenames);  // "mmap" had no file
  EXPECT_FALSE(libc.has_line_numbers);

  const Location& cold = p.location(p.samples[3].location_ids[0]);
  const Mapping& app_synthetic = p.mapping(cold.mapping_id);
  EXPECT_EQ(p.str(app_synthetic.filename), kApp);
  EXPECT_NE(cold.mapping_id, 1u);
  EXPECT_EQ(cold.address - app_synthetic.memory_start + app_synthetic.file_offset, 0x9000u);

  for (const Location& loc : p.locations) {
    const Mapping& m = p.mapping(loc.mapping_id);
    EXPECT_GE(loc.address, m.memory_start);
    EXPECT_LT(loc.address, m.memory_limit);
  }
  for (size_t i = 0; i < p.mappings.size(); ++i) {
    for (size_t j = i + 1; j < p.mappings.size(); ++j) {
      const Mapping& a = p.mappings[i];
      const Mapping& b = p.mappings[j];
      EXPECT_TRUE(a.memory_limit <= b.memory_start || b.memory_limit <= a.memory_start)
          << "mappings " << a.id << " and " << b.id << " overlap";
    }
  }
}

TEST(Pprof, UnsymbolizedAndModulelessFrames) {
  PprofInput in;
  in.sites.push_back(site({frame("", "", 0, "/lib/libfoo.so", 0x4321),
                           frame("jit_a", "", 0, "", 0), frame("jit_b", "", 0, "", 0),
                           frame("jit_a", "", 0, "", 0)},
                          "", 8, 1, 8, 1));
  const Profile p = decode_or_fail(encode_pprof(in));
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_TRUE(p.samples[0].labels.empty());  // no kind, no label
  EXPECT_EQ(p.stack(p.samples[0]), (std::vector<std::string>{"?", "jit_a", "jit_b", "jit_a"}));
  const auto& ids = p.samples[0].location_ids;
  EXPECT_NE(ids[1], ids[2]) << "module-less frames must not merge by offset alone";
  EXPECT_EQ(ids[1], ids[3]);
  EXPECT_EQ(p.location(ids[1]).mapping_id, 0u);

  const Mapping& foo = p.mapping(p.location(ids[0]).mapping_id);
  // Tried and not named: has_functions all the same, or pprof POSTs the
  // address to /debug/pprof/symbol and fails the whole fetch (issue 35).
  EXPECT_TRUE(foo.has_functions);
  EXPECT_FALSE(foo.has_filenames);
  EXPECT_FALSE(foo.has_line_numbers);
  EXPECT_EQ(p.location(ids[0]).address - foo.memory_start, 0x4321u);
}

// Python frames (decision python-frames) have no module:
// each is a function with its file, at its line, told apart from another
// line of the same function.
TEST(Pprof, PythonFramesAreFunctionsWithFileAndLine) {
  auto py = [](std::string fn, int line) {
    Frame f = frame(std::move(fn), "/srv/app.py", line, "", 0);
    f.language = "python";
    return f;
  };
  PprofInput in;
  in.sites.push_back(site({frame("alloc_cpu", "", 0, kLibc, 0x10), py("keep_outputs", 12), py("handler", 30)},
                          "heap", 64, 1, 64, 1));
  in.sites.push_back(site({frame("alloc_cpu", "", 0, kLibc, 0x10), py("keep_outputs", 13), py("handler", 30)},
                          "heap", 32, 1, 32, 1));
  const Profile p = decode_or_fail(encode_pprof(in));
  ASSERT_EQ(p.samples.size(), 2u);
  EXPECT_EQ(p.stack(p.samples[0]), (std::vector<std::string>{"alloc_cpu", "keep_outputs", "handler"}));
  const Location& keep12 = p.location(p.samples[0].location_ids[1]);
  const Location& keep13 = p.location(p.samples[1].location_ids[1]);
  EXPECT_EQ(keep12.mapping_id, 0u);
  ASSERT_EQ(keep12.lines.size(), 1u);
  EXPECT_EQ(keep12.lines[0].line, 12);
  EXPECT_EQ(keep13.lines[0].line, 13);
  EXPECT_NE(p.samples[0].location_ids[1], p.samples[1].location_ids[1]);
  EXPECT_EQ(keep12.lines[0].function_id, keep13.lines[0].function_id);  // one function, two lines
  EXPECT_EQ(p.str(p.function(keep12.lines[0].function_id).filename), "/srv/app.py");
  EXPECT_EQ(p.samples[0].location_ids[2], p.samples[1].location_ids[2]);
}

TEST(Pprof, ValuesClampAndSamplingPeriod) {
  PprofInput in;
  in.sites.push_back(site({}, "heap", std::numeric_limits<uint64_t>::max(), 1, 2, 3));
  in.sampled = true;
  in.sample_rate_bytes = 524288.4;
  const Profile p = decode_or_fail(encode_pprof(in));
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].values[1], uint64_t{std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(p.period, 524288);
}

TEST(Pprof, GzipRoundTrips) {
  const std::string raw = encode_pprof(sample_input());
  auto gz = encode_pprof_gz(sample_input());
  ASSERT_TRUE(gz.ok()) << gz.error().message;
  ASSERT_GE(gz->size(), 18u);
  EXPECT_EQ(static_cast<uint8_t>((*gz)[0]), 0x1f);  // gzip magic, not zlib's header
  EXPECT_EQ(static_cast<uint8_t>((*gz)[1]), 0x8b);
  EXPECT_EQ(gunzip(*gz), raw);

  auto empty = gzip("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(gunzip(*empty), "");
}

TEST(Pprof, HundredThousandSites) {
  PprofInput in;
  constexpr size_t kSites = 100'000;
  in.sites.reserve(kSites);
  for (size_t i = 0; i < kSites; ++i) {
    std::vector<Frame> frames;
    // 10 frames, the leaf unique per site, the rest shared with a stride.
    frames.push_back(frame("leaf_" + std::to_string(i), "/src/gen.cc", static_cast<int>(i % 5000),
                           "/usr/bin/gen", 0x10000 + i * 16));
    for (size_t d = 1; d < 10; ++d) {
      const size_t k = (i / 100 + d) % 1000;
      frames.push_back(frame("caller_" + std::to_string(k), "/src/gen.cc", static_cast<int>(k),
                             k % 2 ? "/usr/lib/libgen.so" : "/usr/bin/gen", 0x900000 + k * 32));
    }
    in.sites.push_back(site(std::move(frames), i % 3 ? "heap" : "mmap", i + 1, 1, i + 1, 1));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string raw = encode_pprof(in);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  std::printf("100k sites x 10 frames: encoded in %.0f ms, %zu bytes\n",
              std::chrono::duration<double, std::milli>(elapsed).count(), raw.size());
  const Profile p = decode_or_fail(raw);
  EXPECT_EQ(p.samples.size(), kSites);
  EXPECT_EQ(p.locations.size(), kSites + 1000);
  EXPECT_EQ(p.functions.size(), kSites + 1000);
  EXPECT_EQ(p.mappings.size(), 2u);
}

// ---- The real consumers: protoc with the published schema, go tool pprof. ----

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CommandResult run(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class PprofTools : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lw_pprof_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& data) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << data;
    return path;
  }
  // go tool pprof with its caches and history kept out of the real $HOME.
  std::string go_pprof(const std::string& args) {
    return "HOME=" + dir_ + " GOCACHE=" + dir_ + "/gocache PPROF_TMPDIR=" + dir_ +
           " /usr/bin/go tool pprof " + args;
  }
  std::string dir_;
};

TEST_F(PprofTools, ProtocDecodesWithPublishedSchema) {
  if (access("/usr/bin/protoc", X_OK) != 0) GTEST_SKIP() << "protoc not installed";
  const std::string pb = write("out.pb", encode_pprof(sample_input()));
  const CommandResult r = run(std::string("/usr/bin/protoc --proto_path=") + LW_TEST_DATA_DIR +
                              "/pprof --decode=perftools.profiles.Profile profile.proto < " + pb);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* want : {"\"inuse_space\"", "\"leak_big\"", "\"/src/app/leak.cc\"",
                           "\"/usr/bin/app\"", "\"kind\"", "\"mmap\"", "has_functions: true",
                           "time_nanos: 1700000000123456789"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << " missing in:\n" << r.output;
  }
  // Every field decoded against the schema: protoc prints unknown fields as
  // bare numbers ("7: 1"), which would mean a wrong field number.
  EXPECT_EQ(r.output.find("\n1:"), std::string::npos) << r.output;
  for (const char* line_start : {"\n  1:", "\n  2:", "\n  3:", "\n  4:", "\n  5:", "\n  6:",
                                 "\n  7:", "\n  8:", "\n  9:", "\n  10:", "\n    1:", "\n    2:"}) {
    EXPECT_EQ(r.output.find(line_start), std::string::npos) << r.output;
  }
}

TEST_F(PprofTools, GoToolPprofShowsTopFunctionAndBytes) {
  if (access("/usr/bin/go", X_OK) != 0) GTEST_SKIP() << "go not installed (/usr/bin/go missing)";
  auto gz = encode_pprof_gz(sample_input());
  ASSERT_TRUE(gz.ok());
  const std::string path = write("out.pb.gz", *gz);

  const CommandResult top = run(go_pprof("-top -sample_index=inuse_space -unit=B " + path));
  ASSERT_EQ(top.status, 0) << top.output;
  EXPECT_NE(top.output.find("Type: inuse_space"), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("of 4718592B total"), std::string::npos) << top.output;  // 4.5 MiB
  // First row under the header: the biggest flat entry.
  const size_t header = top.output.find("flat%");
  ASSERT_NE(header, std::string::npos) << top.output;
  const size_t row = top.output.find('\n', header) + 1;
  const std::string first = top.output.substr(row, top.output.find('\n', row) - row);
  EXPECT_NE(first.find("3145728B"), std::string::npos) << top.output;
  EXPECT_NE(first.find("leak_big"), std::string::npos) << top.output;

  // Default sample type, and file:line per location.
  const CommandResult lines = run(go_pprof("-top -lines -unit=B " + path));
  ASSERT_EQ(lines.status, 0) << lines.output;
  EXPECT_NE(lines.output.find("Type: inuse_space"), std::string::npos) << lines.output;
  EXPECT_NE(lines.output.find("leak_big /src/app/leak.cc:12"), std::string::npos) << lines.output;

  // pprof's own view of the fields: labels, addresses, mapping flags.
  const CommandResult raw = run(go_pprof("-raw " + path));
  ASSERT_EQ(raw.status, 0) << raw.output;
  for (const char* want : {"inuse_space/bytes[dflt]", "3    3145728          5    5242880: 1 2",
                           "kind:[heap]", "kind:[mmap]", "PeriodType: space bytes",
                           "0x555555554200 M=1 leak_big /src/app/leak.cc:12",
                           "0x555555554000/0x555555559000/0x1000 /usr/bin/app abcdef01 "
                           "[FN][FL][LN]",
                           "Comment: leakwatch test profile"}) {
    EXPECT_NE(raw.output.find(want), std::string::npos) << want << " missing in:\n" << raw.output;
  }
}

// An address with inlined functions is one Location whose Lines run from
// the innermost inlined function to the function it was inlined into
// (profile.proto), and the sample lists it once.
TEST(Pprof, InlinedFramesAreLinesOfOneLocation) {
  PprofInput in;
  Frame inner = frame("inlined_alloc", "/src/app/alloc.h", 7, kApp, 0x1234, "abcdef01");
  inner.inlined = true;
  Frame outer = frame("leak_through_inline", "/src/app/leak.cc", 30, kApp, 0x1234, "abcdef01");
  Frame main_frame = frame("main", "/src/app/main.cc", 40, kApp, 0x1500, "abcdef01");
  in.sites.push_back(site({inner, outer, main_frame}, "heap", 100, 1, 100, 1));
  in.mappings.push_back({0x555555554000, 0x555555559000, 0x1000, kApp, ""});
  const Profile p = decode_or_fail(encode_pprof(in));
  ASSERT_EQ(p.samples.size(), 1u);
  ASSERT_EQ(p.samples[0].location_ids.size(), 2u);
  const Location& leaf = p.location(p.samples[0].location_ids[0]);
  ASSERT_EQ(leaf.lines.size(), 2u);
  EXPECT_EQ(p.str(p.function(leaf.lines[0].function_id).name), "inlined_alloc");
  EXPECT_EQ(leaf.lines[0].line, 7);
  EXPECT_EQ(p.str(p.function(leaf.lines[1].function_id).name), "leak_through_inline");
  EXPECT_EQ(leaf.lines[1].line, 30);
  EXPECT_EQ(p.str(p.function(p.location(p.samples[0].location_ids[1]).lines.at(0).function_id).name),
            "main");
}

}  // namespace
}  // namespace lw
