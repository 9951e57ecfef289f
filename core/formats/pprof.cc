// SPDX-License-Identifier: Apache-2.0
#include "core/formats/pprof.h"

#include <zlib.h>

#include <algorithm>
#include <span>
#include <cerrno>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lw {
namespace {

// ---- Protobuf wire format: just what profile.proto needs. ----

constexpr uint32_t kWireVarint = 0;
constexpr uint32_t kWireLen = 2;

// Field numbers of profile.proto (github.com/google/pprof/proto/profile.proto).
namespace field {
constexpr uint32_t kProfileSampleType = 1, kProfileSample = 2, kProfileMapping = 3,
                   kProfileLocation = 4, kProfileFunction = 5, kProfileStringTable = 6,
                   kProfileTimeNanos = 9, kProfileDurationNanos = 10, kProfilePeriodType = 11,
                   kProfilePeriod = 12, kProfileComment = 13, kProfileDefaultSampleType = 14;
constexpr uint32_t kValueTypeType = 1, kValueTypeUnit = 2;
constexpr uint32_t kSampleLocationId = 1, kSampleValue = 2, kSampleLabel = 3;
constexpr uint32_t kLabelKey = 1, kLabelStr = 2, kLabelNum = 3;
constexpr uint32_t kMappingId = 1, kMappingMemoryStart = 2, kMappingMemoryLimit = 3,
                   kMappingFileOffset = 4, kMappingFilename = 5, kMappingBuildId = 6,
                   kMappingHasFunctions = 7, kMappingHasFilenames = 8, kMappingHasLineNumbers = 9;
constexpr uint32_t kLocationId = 1, kLocationMappingId = 2, kLocationAddress = 3,
                   kLocationLine = 4;
constexpr uint32_t kLineFunctionId = 1, kLineLine = 2;
constexpr uint32_t kFunctionId = 1, kFunctionName = 2, kFunctionSystemName = 3,
                   kFunctionFilename = 4;
}  // namespace field

size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void put_varint(std::string& out, uint64_t v) {
  char buf[10];
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out.append(buf, n);
}

void put_tag(std::string& out, uint32_t field_number, uint32_t wire_type) {
  put_varint(out, (uint64_t{field_number} << 3) | wire_type);
}

// proto3 scalars: zero is the default and is not written, as protoc does.
void put_uint(std::string& out, uint32_t field_number, uint64_t v) {
  if (v == 0) return;
  put_tag(out, field_number, kWireVarint);
  put_varint(out, v);
}

// int64 goes on the wire as its two's complement in a varint.
void put_int(std::string& out, uint32_t field_number, int64_t v) {
  put_uint(out, field_number, static_cast<uint64_t>(v));
}

// Always written: repeated strings and embedded messages must appear even
// when empty (string_table[0] is "").
void put_bytes(std::string& out, uint32_t field_number, std::string_view bytes) {
  put_tag(out, field_number, kWireLen);
  put_varint(out, bytes.size());
  out.append(bytes);
}

template <typename Int>
void put_packed(std::string& out, uint32_t field_number, const std::vector<Int>& values) {
  if (values.empty()) return;
  size_t bytes = 0;
  for (Int v : values) bytes += varint_size(static_cast<uint64_t>(v));
  put_tag(out, field_number, kWireLen);
  put_varint(out, bytes);
  for (Int v : values) put_varint(out, static_cast<uint64_t>(v));
}

int64_t clamp_to_int64(uint64_t v) {
  return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: file offsets are not well spread
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Interns strings by view. Every view handed in must outlive the table: they
// point into the PprofInput or at literals, both alive for the whole encode.
class StringTable {
 public:
  StringTable() { index(""); }

  uint64_t index(std::string_view s) {
    auto [it, inserted] = ids_.try_emplace(s, strings_.size());
    if (inserted) strings_.push_back(s);
    return it->second;
  }

  const std::vector<std::string_view>& strings() const { return strings_; }

 private:
  std::unordered_map<std::string_view, uint64_t> ids_;
  std::vector<std::string_view> strings_;
};

constexpr uint64_t kPageSize = 4096;

// Rounds up to a page; saturates instead of wrapping past 2^64.
uint64_t page_align_up(uint64_t v) {
  if (v > std::numeric_limits<uint64_t>::max() - (kPageSize - 1)) {
    return std::numeric_limits<uint64_t>::max() & ~(kPageSize - 1);
  }
  return (v + kPageSize - 1) & ~(kPageSize - 1);
}

struct MappingOut {
  uint64_t start = 0;
  uint64_t limit = 0;
  uint64_t file_offset = 0;
  uint64_t filename = 0;  // string index
  uint64_t build_id = 0;  // string index
  bool synthetic = false;
  uint64_t max_offset = 0;  // synthetic only: the largest file offset seen
  // has_functions tells pprof that symbolization was done: it then neither
  // re-symbolizes from local binaries nor POSTs the unnamed addresses to
  // /debug/pprof/symbol (which the daemon does not serve: a failed POST
  // fails the whole fetch, as it did on every Python process). The daemon
  // tried every frame it serves, so a mapping with any location has it;
  // frames it could not name stay addresses. has_filenames and
  // has_line_numbers hold only if no location lacked the part.
  bool any_location = false;
  bool all_filenames = true;
  bool all_line_numbers = true;
};

// Mappings that share one module path, for frame lookup.
struct ModuleMappings {
  std::vector<uint64_t> real_ids;  // ids of PprofMappings with this path
  uint64_t synthetic_id = 0;       // for offsets none of them covers; 0 until needed
};

// Mapped frames are keyed by (mapping, file offset), which is (mapping,
// address). Frames without a module have no address to tell them apart, so
// their function and line join the key.
struct LocationKey {
  uint64_t mapping_id = 0;
  uint64_t offset = 0;
  uint64_t function_id = 0;
  int64_t line = 0;
  bool operator==(const LocationKey&) const = default;
};

struct LocationKeyHash {
  size_t operator()(const LocationKey& k) const {
    const uint64_t rest = mix(k.function_id ^ mix(static_cast<uint64_t>(k.line)));
    return mix(k.mapping_id ^ mix(k.offset ^ rest));
  }
};

struct LocationOut {
  uint64_t mapping_id = 0;
  uint64_t offset = 0;
  uint64_t function_id = 0;  // 0: unsymbolized, no Line
  int64_t line = 0;
  // Functions inlined at this address, innermost first: written as Lines
  // before the one above (pprof: the last Line is the caller the others
  // were inlined into).
  std::vector<std::pair<uint64_t, int64_t>> inlined;  // function id, line
};

struct FunctionKey {
  uint64_t name = 0;      // string index
  uint64_t filename = 0;  // string index
  bool operator==(const FunctionKey&) const = default;
};

struct FunctionKeyHash {
  size_t operator()(const FunctionKey& k) const { return mix(k.name ^ mix(k.filename)); }
};

class Encoder {
 public:
  explicit Encoder(const PprofInput& input) : input_(input) {}

  std::string encode() {
    // Interned first so they lead the string table, as in Go's profiles.
    const uint64_t inuse_objects = strings_.index("inuse_objects");
    const uint64_t inuse_space = strings_.index("inuse_space");
    const uint64_t alloc_objects = strings_.index("alloc_objects");
    const uint64_t alloc_space = strings_.index("alloc_space");
    const uint64_t count = strings_.index("count");
    const uint64_t bytes = strings_.index("bytes");
    const uint64_t space = strings_.index("space");
    kind_key_ = strings_.index("kind");
    const uint64_t comment = strings_.index(input_.comment);  // 0 when there is none

    add_real_mappings();

    // Samples dominate the output: about 3 bytes per frame (a location id)
    // plus values and label. Reserving once keeps a 100k-site profile from
    // being copied through every doubling.
    size_t frames = 0;
    for (const PprofSite& site : input_.sites) frames += site.frames.size();
    std::string out;
    out.reserve(frames * 3 + input_.sites.size() * 40 + 1024);

    const std::pair<uint64_t, uint64_t> sample_types[] = {
        {inuse_objects, count}, {inuse_space, bytes}, {alloc_objects, count}, {alloc_space, bytes}};
    for (const auto& [type, unit] : sample_types) {
      put_value_type(out, field::kProfileSampleType, type, unit);
    }
    // Samples reference locations by id only, so they can be written while
    // locations are still being discovered; addresses come after placement.
    for (const PprofSite& site : input_.sites) add_sample(out, site);
    place_synthetic_mappings();
    write_mappings(out);
    write_locations(out);
    write_functions(out);
    for (std::string_view s : strings_.strings()) put_bytes(out, field::kProfileStringTable, s);
    put_int(out, field::kProfileTimeNanos, input_.time_nanos);
    put_int(out, field::kProfileDurationNanos, input_.duration_nanos);
    put_value_type(out, field::kProfilePeriodType, space, bytes);
    put_int(out, field::kProfilePeriod, period());
    if (comment != 0) {
      // Repeated int64 in proto3 is packed.
      put_packed(out, field::kProfileComment, std::vector<uint64_t>{comment});
    }
    put_uint(out, field::kProfileDefaultSampleType, inuse_space);
    return out;
  }

 private:
  // Go's convention: the period is the mean sampling interval in bytes, and
  // 1 when every allocation is recorded (MemProfileRate = 1).
  int64_t period() const {
    if (!input_.sampled || !(input_.sample_rate_bytes >= 1)) return 1;  // also catches NaN
    constexpr double kMax = 9.0e18;  // below INT64_MAX, exactly representable
    return std::llround(std::min(input_.sample_rate_bytes, kMax));
  }

  void add_real_mappings() {
    mappings_.reserve(input_.mappings.size());
    for (const PprofMapping& m : input_.mappings) {
      MappingOut out;
      out.start = m.start;
      out.limit = m.limit;
      out.file_offset = m.file_offset;
      out.filename = strings_.index(m.path);
      out.build_id = strings_.index(m.build_id);
      mappings_.push_back(out);
      modules_[m.path].real_ids.push_back(mappings_.size());
    }
  }

  // The mapping id for a frame, 0 when it has no module.
  uint64_t mapping_for(const Frame& frame) {
    if (frame.module.empty()) return 0;
    ModuleMappings& module = modules_[frame.module];
    for (uint64_t id : module.real_ids) {
      const MappingOut& m = mappings_[id - 1];
      const uint64_t size = m.limit > m.start ? m.limit - m.start : 0;
      if (frame.offset >= m.file_offset && frame.offset - m.file_offset < size) return id;
    }
    if (module.synthetic_id == 0) {
      MappingOut out;
      out.synthetic = true;
      out.filename = strings_.index(frame.module);
      mappings_.push_back(out);
      module.synthetic_id = mappings_.size();
    }
    MappingOut& synthetic = mappings_[module.synthetic_id - 1];
    synthetic.max_offset = std::max(synthetic.max_offset, frame.offset);
    return module.synthetic_id;
  }

  uint64_t function_for(const Frame& frame) {
    // pprof's Line needs a function; with no name there is nothing to show
    // but the address, which pprof prints on its own.
    if (frame.function.empty()) return 0;
    const FunctionKey key{strings_.index(frame.function), strings_.index(frame.file)};
    auto [it, inserted] = function_ids_.try_emplace(key, functions_.size() + 1);
    if (inserted) functions_.push_back(key);
    return it->second;
  }

  // `inlined`: the frames inlined at the same address, innermost first
  // (Frame::inlined), folded into this location's Lines.
  uint64_t location_for(const Frame& frame, std::span<const Frame> inlined = {}) {
    LocationKey key{mapping_for(frame), frame.offset, 0, 0};
    if (key.mapping_id == 0) {
      key.function_id = function_for(frame);
      key.line = frame.line;
    }
    auto [it, inserted] = location_ids_.try_emplace(key, locations_.size() + 1);
    if (!inserted) return it->second;

    LocationOut loc;
    loc.mapping_id = key.mapping_id;
    loc.offset = frame.offset;
    loc.function_id = key.mapping_id == 0 ? key.function_id : function_for(frame);
    loc.line = loc.function_id != 0 ? frame.line : 0;
    for (const Frame& f : inlined)
      if (uint64_t id = function_for(f)) loc.inlined.emplace_back(id, f.line);
    locations_.push_back(std::move(loc));
    const LocationOut& added = locations_.back();
    if (added.mapping_id != 0) {
      MappingOut& m = mappings_[added.mapping_id - 1];
      m.any_location = true;
      m.all_filenames &= !frame.file.empty();
      m.all_line_numbers &= frame.line > 0;
      if (m.build_id == 0 && !frame.build_id.empty()) m.build_id = strings_.index(frame.build_id);
    }
    return it->second;
  }

  void add_sample(std::string& out, const PprofSite& site) {
    location_scratch_.clear();
    // A run of inlined frames and the physical frame after it (same module
    // and offset) are one location.
    size_t run = 0;
    for (size_t i = 0; i < site.frames.size(); ++i) {
      const Frame& frame = site.frames[i];
      const bool folds = frame.inlined && i + 1 < site.frames.size() &&
                         site.frames[i + 1].module == frame.module &&
                         site.frames[i + 1].offset == frame.offset;
      if (folds) {
        ++run;
        continue;
      }
      location_scratch_.push_back(
          location_for(frame, std::span<const Frame>(site.frames).subspan(i - run, run)));
      run = 0;
    }
    const std::vector<int64_t> values = {
        clamp_to_int64(site.inuse_objects), clamp_to_int64(site.inuse_bytes),
        clamp_to_int64(site.alloc_objects), clamp_to_int64(site.alloc_bytes)};

    message_.clear();
    put_packed(message_, field::kSampleLocationId, location_scratch_);
    put_packed(message_, field::kSampleValue, values);
    if (!site.kind.empty()) {
      // A label whose str is index 0 ("") reads back as no label at all.
      submessage_.clear();
      put_uint(submessage_, field::kLabelKey, kind_key_);
      put_uint(submessage_, field::kLabelStr, strings_.index(site.kind));
      put_bytes(message_, field::kSampleLabel, submessage_);
    }
    for (const auto& [key, value] : site.labels) {
      if (value.empty()) continue;
      submessage_.clear();
      put_uint(submessage_, field::kLabelKey, strings_.index(key));
      put_uint(submessage_, field::kLabelStr, strings_.index(value));
      put_bytes(message_, field::kSampleLabel, submessage_);
    }
    for (const auto& [key, value] : site.num_labels) {
      submessage_.clear();
      put_uint(submessage_, field::kLabelKey, strings_.index(key));
      put_int(submessage_, field::kLabelNum, value);
      put_bytes(message_, field::kSampleLabel, submessage_);
    }
    put_bytes(out, field::kProfileSample, message_);
  }

  // Gives each synthetic mapping a page-aligned range sized to its largest
  // offset, in the lowest gap that no real mapping overlaps, so pprof can
  // still find a location's mapping by address.
  void place_synthetic_mappings() {
    std::vector<std::pair<uint64_t, uint64_t>> taken;  // real [start, limit), by start
    for (const MappingOut& m : mappings_) {
      if (!m.synthetic && m.limit > m.start) taken.emplace_back(m.start, m.limit);
    }
    std::sort(taken.begin(), taken.end());

    size_t next = 0;  // first real range that may end above `cursor`
    uint64_t cursor = 0;
    for (MappingOut& m : mappings_) {
      if (!m.synthetic) continue;
      const uint64_t size = page_align_up(m.max_offset + 1);
      for (;;) {
        while (next < taken.size() && taken[next].second <= cursor) ++next;
        const bool fits = size <= std::numeric_limits<uint64_t>::max() - cursor;
        if (!fits || next == taken.size() || taken[next].first >= cursor + size) break;
        cursor = page_align_up(taken[next].second);
      }
      if (size > std::numeric_limits<uint64_t>::max() - cursor) {
        // The address space is full: only with absurd input. Overlap beats
        // wrapping; pprof tolerates overlapping mappings.
        cursor = 0;
      }
      m.start = cursor;
      m.limit = cursor + size;
      cursor = m.limit;
    }
  }

  void write_mappings(std::string& out) {
    for (size_t i = 0; i < mappings_.size(); ++i) {
      const MappingOut& m = mappings_[i];
      message_.clear();
      put_uint(message_, field::kMappingId, i + 1);
      put_uint(message_, field::kMappingMemoryStart, m.start);
      put_uint(message_, field::kMappingMemoryLimit, m.limit);
      put_uint(message_, field::kMappingFileOffset, m.file_offset);
      put_uint(message_, field::kMappingFilename, m.filename);
      put_uint(message_, field::kMappingBuildId, m.build_id);
      put_uint(message_, field::kMappingHasFunctions, m.any_location);
      put_uint(message_, field::kMappingHasFilenames, m.any_location && m.all_filenames);
      put_uint(message_, field::kMappingHasLineNumbers, m.any_location && m.all_line_numbers);
      put_bytes(out, field::kProfileMapping, message_);
    }
  }

  void write_locations(std::string& out) {
    for (size_t i = 0; i < locations_.size(); ++i) {
      const LocationOut& loc = locations_[i];
      message_.clear();
      put_uint(message_, field::kLocationId, i + 1);
      put_uint(message_, field::kLocationMappingId, loc.mapping_id);
      uint64_t address = loc.offset;
      if (loc.mapping_id != 0) {
        // pprof's own invariant: file offset = address - start + file_offset.
        const MappingOut& m = mappings_[loc.mapping_id - 1];
        address = m.start + (loc.offset - m.file_offset);
      }
      put_uint(message_, field::kLocationAddress, address);
      for (const auto& [function_id, line] : loc.inlined) {
        submessage_.clear();
        put_uint(submessage_, field::kLineFunctionId, function_id);
        put_int(submessage_, field::kLineLine, line);
        put_bytes(message_, field::kLocationLine, submessage_);
      }
      if (loc.function_id != 0) {
        submessage_.clear();
        put_uint(submessage_, field::kLineFunctionId, loc.function_id);
        put_int(submessage_, field::kLineLine, loc.line);
        put_bytes(message_, field::kLocationLine, submessage_);
      }
      put_bytes(out, field::kProfileLocation, message_);
    }
  }

  void write_functions(std::string& out) {
    for (size_t i = 0; i < functions_.size(); ++i) {
      const FunctionKey& fn = functions_[i];
      message_.clear();
      put_uint(message_, field::kFunctionId, i + 1);
      put_uint(message_, field::kFunctionName, fn.name);
      // Frame names are already demangled and there is no mangled one to
      // give. Equal name and system_name is what pprof's own symbolizer
      // writes, and lets pprof simplify C++ names (drop parameters).
      put_uint(message_, field::kFunctionSystemName, fn.name);
      put_uint(message_, field::kFunctionFilename, fn.filename);
      put_bytes(out, field::kProfileFunction, message_);
    }
  }

  static void put_value_type(std::string& out, uint32_t field_number, uint64_t type,
                             uint64_t unit) {
    std::string body;
    put_uint(body, field::kValueTypeType, type);
    put_uint(body, field::kValueTypeUnit, unit);
    put_bytes(out, field_number, body);
  }

  const PprofInput& input_;
  StringTable strings_;
  uint64_t kind_key_ = 0;
  std::vector<MappingOut> mappings_;  // id = index + 1
  std::unordered_map<std::string_view, ModuleMappings> modules_;
  std::vector<LocationOut> locations_;  // id = index + 1
  std::unordered_map<LocationKey, uint64_t, LocationKeyHash> location_ids_;
  std::vector<FunctionKey> functions_;  // id = index + 1
  std::unordered_map<FunctionKey, uint64_t, FunctionKeyHash> function_ids_;
  // Reused per sample/location so the hot loops do not allocate.
  std::vector<uint64_t> location_scratch_;
  std::string message_;
  std::string submessage_;
};

// Ends the deflate stream however gzip() leaves.
struct DeflateGuard {
  z_stream* stream;
  ~DeflateGuard() { deflateEnd(stream); }
};

Error zlib_error(const char* what, int rc, const z_stream& zs) {
  std::string msg = std::string(what) + ": " + (zs.msg != nullptr ? zs.msg : zError(rc));
  return Error{rc == Z_MEM_ERROR ? ENOMEM : 0, std::move(msg)};
}

}  // namespace

std::string encode_pprof(const PprofInput& input) { return Encoder(input).encode(); }

Result<std::string> gzip(std::string_view data) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer rather than zlib's.
  int rc = deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  if (rc != Z_OK) return zlib_error("deflateInit2", rc, zs);
  DeflateGuard guard{&zs};

  // zlib counts in uInt (32 bits), so inputs and outputs over 4 GiB go
  // through in pieces.
  constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max();
  std::string out(deflateBound(&zs, data.size()), '\0');
  size_t in_used = 0;
  size_t out_used = 0;
  do {
    if (zs.avail_in == 0) {
      const size_t n = std::min(kMaxChunk, data.size() - in_used);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in_used));
      zs.avail_in = static_cast<uInt>(n);
      in_used += n;
    }
    // deflateBound is exact for one-shot use; growing covers the chunked case.
    if (out_used == out.size()) out.resize(out.size() * 2);
    const size_t room = std::min(kMaxChunk, out.size() - out_used);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + out_used);
    zs.avail_out = static_cast<uInt>(room);
    rc = deflate(&zs, in_used == data.size() ? Z_FINISH : Z_NO_FLUSH);
    out_used += room - zs.avail_out;
  } while (rc == Z_OK || rc == Z_BUF_ERROR);
  if (rc != Z_STREAM_END) return zlib_error("deflate", rc, zs);
  out.resize(out_used);
  return out;
}

Result<std::string> encode_pprof_gz(const PprofInput& input) { return gzip(encode_pprof(input)); }

}  // namespace lw
