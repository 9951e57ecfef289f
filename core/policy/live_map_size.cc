// SPDX-License-Identifier: Apache-2.0
#include "core/policy/live_map_size.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "core/platform/fd.h"
#include "core/platform/log.h"

namespace lw {

namespace {

uint64_t pow2_at_or_above(uint64_t n) {
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// /proc/meminfo, /proc/self/cgroup and cgroupfs files: small, bounded.
std::string read_all(const std::string& path) {
  Result<std::string> text = read_regular_file(path, 64 << 10);
  return text ? std::move(*text) : std::string();
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

uint64_t live_map_bucket_bytes(uint64_t entries) {
  return pow2_at_or_above(std::max<uint64_t>(entries, 1)) * kLiveMapBucketBytes;
}

uint64_t live_map_worst_bytes(uint64_t entries) {
  return entries * kLiveMapEntryBytes + live_map_bucket_bytes(entries);
}

LiveMapSizing size_live_map(uint32_t configured_entries, uint32_t percent_of_ram,
                            uint64_t reserved_bytes, const LiveMapHost& host) {
  LiveMapSizing s;
  s.ram_bytes = host.ram_bytes;
  s.cgroup_limit_bytes = host.cgroup_limit_bytes;
  if (configured_entries != 0) {
    s.entries = configured_entries;
  } else {
    s.automatic = true;
    uint64_t allowed = host.ram_bytes / 100 * percent_of_ram;
    if (host.cgroup_limit_bytes != 0)
      allowed = std::min(allowed, host.cgroup_limit_bytes > reserved_bytes
                                      ? host.cgroup_limit_bytes - reserved_bytes
                                      : 0);
    // For each bucket array size B, at most min(B, (allowed - 16 B) / 96)
    // entries: those use at most B buckets, so they fit. Take the best B.
    uint64_t best = 0;
    for (uint64_t b = 1; b <= kLiveMapMaxEntries; b <<= 1) {
      const uint64_t buckets = b * kLiveMapBucketBytes;
      if (buckets >= allowed) break;
      best = std::max(best, std::min(b, (allowed - buckets) / kLiveMapEntryBytes));
    }
    if (best < kLiveMapMinAutoEntries) {
      best = kLiveMapMinAutoEntries;
      s.envelope_too_small = true;
    }
    s.entries = static_cast<uint32_t>(std::min<uint64_t>(best, kLiveMapMaxEntries));
  }
  s.worst_bytes = live_map_worst_bytes(s.entries);
  s.bucket_bytes = live_map_bucket_bytes(s.entries);
  return s;
}

std::string describe(const LiveMapSizing& s) {
  std::string out = std::to_string(s.entries) + " entries, " + mib(s.worst_bytes) + " when full (" +
                    mib(s.bucket_bytes) + " at start), ";
  if (!s.automatic) return out + "set by limits.live_map_entries";
  out += "automatic: from RAM " + mib(s.ram_bytes);
  if (s.cgroup_limit_bytes != 0) out += " and the cgroup limit " + mib(s.cgroup_limit_bytes);
  return out;
}

std::optional<uint64_t> parse_meminfo_total(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kb) == 1) return kb * 1024ull;
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_cgroup_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return 0;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return std::nullopt;
  if (*end != '\0' && *end != '\n') return std::nullopt;
  // cgroup v1 says "unlimited" as PAGE_COUNTER_MAX pages: about 2^63.
  if (v >= (1ull << 62)) return 0;
  return v;
}

std::optional<std::pair<std::string, bool>> parse_memory_cgroup(const std::string& proc_cgroup) {
  std::istringstream in(proc_cgroup);
  std::string line;
  std::optional<std::pair<std::string, bool>> v2;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = std::make_pair(path, true);
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ','))
      if (c == "memory") return std::make_pair(path, false);
  }
  return v2;
}

LiveMapHost read_live_map_host() {
  LiveMapHost h;
  h.ram_bytes = parse_meminfo_total(read_all("/proc/meminfo")).value_or(0);
  const auto cg = parse_memory_cgroup(read_all("/proc/self/cgroup"));
  if (!cg) return h;
  h.cgroup_limit_bytes =
      cgroup_memory_limit(cg->second ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory", cg->first, cg->second);
  return h;
}

uint64_t cgroup_memory_limit(const std::string& mount, const std::string& cgroup, bool v2) {
  const char* file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
  uint64_t tightest = 0;
  std::string path = cgroup;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    const uint64_t limit = parse_cgroup_limit(read_all(mount + path + file)).value_or(0);
    if (limit != 0 && (tightest == 0 || limit < tightest)) tightest = limit;
    if (path.empty()) break;
    path.erase(path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  }
  return tightest;
}

LiveMapSizing live_map_sizing(const Config& config) {
  const uint64_t reserved = config.limits.max_daemon_memory_bytes + config.ringbuf_bytes +
                            config.unwind.max_table_bytes + kLiveMapEnvelopeReserveBytes;
  return size_live_map(config.limits.live_map_entries, config.limits.live_map_memory_percent, reserved,
                       read_live_map_host());
}

LiveMapSizing top_live_map_sizing(uint32_t live_max) {
  const LiveMapHost host = read_live_map_host();
  return size_live_map(live_max, LimitsConfig{}.live_map_memory_percent, host.cgroup_limit_bytes / 2,
                       host);
}

void log_live_map(const LiveMapSizing& s) {
  LW_LOG_INFO("live map: %s", describe(s).c_str());
  if (s.envelope_too_small)
    LW_LOG_WARN("live map: the memory cgroup limit less the daemon's other memory "
                "(limits.max_daemon_memory_bytes, ringbuf_bytes, unwind.max_table_bytes, 90 MiB) "
                "leaves room for fewer than %u entries; using %u anyway: raise the limit "
                "(MemoryMax) or set limits.live_map_entries",
                kLiveMapMinAutoEntries, kLiveMapMinAutoEntries);
}

}  // namespace lw
