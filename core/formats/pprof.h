/* SPDX-License-Identifier: Apache-2.0 */
// Heap profiles in pprof's format (github.com/google/pprof, profile.proto),
// encoded by hand: the schema is small and stable, and a protobuf runtime
// would be the daemon's only user of one. `go tool pprof` and every pprof
// consumer (Pyroscope, Parca, Grafana) read the result directly.
//
// Layout follows Go's heap profiles so tools behave as they do for Go:
// four sample types (inuse_objects, inuse_space, alloc_objects, alloc_space),
// inuse_space the default, period type space/bytes. Each sample carries a
// string label "kind" (heap, mmap, cuda_device, ...) for `-tagfocus`.
//
// Addresses: the daemon knows each frame as (module, file offset). A frame
// whose module has a PprofMapping covering that offset gets the mapping's
// real address (start + offset - file_offset); any other module gets a
// synthetic range of its own, placed above every real mapping, with
// file_offset 0 so the address still maps back to the same file offset.
// Frames without a module get no mapping and the offset as address.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/platform/result.h"
#include "core/symbols/symbolizer.h"

namespace lw {

// One allocation site: a call stack and what it holds.
struct PprofSite {
  std::vector<Frame> frames;  // leaf first
  std::string kind;           // "heap", "mmap", "cuda_device", ...; "" gets no label
  uint64_t inuse_bytes = 0;
  uint64_t inuse_objects = 0;
  uint64_t alloc_bytes = 0;
  uint64_t alloc_objects = 0;
  // More sample labels (pprof's -tagfocus): string and numeric ones, e.g.
  // comm and pid when one profile holds several processes.
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<std::pair<std::string, int64_t>> num_labels;
};

// A mapped range of a module, as in /proc/PID/maps.
struct PprofMapping {
  uint64_t start = 0;        // first address
  uint64_t limit = 0;        // one past the last address
  uint64_t file_offset = 0;  // file offset mapped at `start`
  std::string path;          // matched against Frame::module
  std::string build_id;      // lowercase hex, may be ""
};

struct PprofInput {
  std::vector<PprofSite> sites;
  std::vector<PprofMapping> mappings;
  int64_t time_nanos = 0;      // when the profile was taken, Unix epoch
  int64_t duration_nanos = 0;  // how long it covers
  std::string comment;         // free text, shown by `pprof -comments`; "" for none
  // True when the values are estimates scaled up from sampled allocations;
  // sample_rate_bytes is then the mean sampling interval, written as the
  // profile's period (as Go does with MemProfileRate).
  bool sampled = false;
  double sample_rate_bytes = 0;
};

// Serialized perftools.profiles.Profile (uncompressed protobuf). Values above
// INT64_MAX are clamped (pprof values are int64). Never fails; an empty input
// is a valid profile with sample types and no samples.
std::string encode_pprof(const PprofInput& input);

// gzip (RFC 1952) of `data`, as pprof files are conventionally stored and
// served. Fails only if zlib does (out of memory).
Result<std::string> gzip(std::string_view data);

// gzip(encode_pprof(input)): what /debug/pprof/heap-style endpoints serve.
Result<std::string> encode_pprof_gz(const PprofInput& input);

}  // namespace lw
