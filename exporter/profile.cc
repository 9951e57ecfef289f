// SPDX-License-Identifier: Apache-2.0
#include "exporter/profile.h"

#include <array>
#include <set>
#include <tuple>

namespace lw {

namespace {

constexpr char kOtherSites[] = "[other sites]";

// Appends snap's sites (and the rest rows) to `in`, with `labels` on each.
void add_sites(const ProcessSnapshot& snap, PprofInput& in,
               const std::vector<std::pair<std::string, std::string>>& labels,
               const std::vector<std::pair<std::string, int64_t>>& num_labels) {
  std::array<KindTotals, LW_KIND_MAX> shown{};
  for (const SiteSnapshot& s : snap.sites) {
    PprofSite p;
    p.frames = s.frames;
    p.kind = kind_name(s.kind);
    p.inuse_bytes = s.live_bytes;
    p.inuse_objects = s.live_allocations;
    p.alloc_bytes = s.allocated_bytes;
    p.alloc_objects = s.allocations;
    p.labels = labels;
    p.num_labels = num_labels;
    KindTotals& k = shown[s.kind];
    k.live_bytes += s.live_bytes;
    k.live_allocations += s.live_allocations;
    k.allocated_bytes += s.allocated_bytes;
    k.allocations += s.allocations;
    in.sites.push_back(std::move(p));
  }
  for (uint32_t kind = 0; kind < LW_KIND_MAX; ++kind) {
    const KindTotals& all = snap.kinds[kind];
    const KindTotals& k = shown[kind];
    if (all.live_bytes == k.live_bytes && all.allocated_bytes == k.allocated_bytes) continue;
    PprofSite other;
    Frame f;
    f.function = kOtherSites;
    // A module, so the location gets a mapping like every other sample's
    // (ingesters have crashed on locations without one).
    f.module = kOtherSites;
    f.offset = kind;
    other.frames.push_back(f);
    other.kind = kind_name(kind);
    other.inuse_bytes = all.live_bytes - k.live_bytes;
    other.inuse_objects = all.live_allocations - k.live_allocations;
    other.alloc_bytes = all.allocated_bytes - k.allocated_bytes;
    other.alloc_objects = all.allocations - k.allocations;
    other.labels = labels;
    other.num_labels = num_labels;
    in.sites.push_back(std::move(other));
  }
}

}  // namespace

PprofInput profile_input(const ProcessSnapshot& snap, double started_unix_s) {
  PprofInput in;
  in.time_nanos = static_cast<int64_t>(snap.timestamp * 1e9);
  in.duration_nanos =
      started_unix_s > 0 ? static_cast<int64_t>((snap.timestamp - started_unix_s) * 1e9) : 0;
  in.comment = "leakwatch pid " + std::to_string(snap.pid) + " (" + snap.comm + ")";
  if (snap.sample_mean_bytes > 0) {
    // Heap values are estimates from byte sampling; the period says at what
    // mean (as Go's MemProfileRate).
    in.sampled = true;
    in.sample_rate_bytes = static_cast<double>(snap.sample_mean_bytes);
    in.comment += "; heap values estimated from allocations sampled every " +
                  std::to_string(snap.sample_mean_bytes) + " bytes on average";
  }
  if (snap.heap_stale_since > 0) in.comment += "; heap figures frozen (probes detached)";
  add_sites(snap, in, {}, {});
  in.mappings = snap.mappings;
  return in;
}

PprofInput profile_input_all(const DaemonSnapshot& snap) {
  PprofInput in;
  in.time_nanos = static_cast<int64_t>(snap.timestamp * 1e9);
  in.comment = "leakwatch: " + std::to_string(snap.processes.size()) +
               " traced processes; samples labelled pid, comm, namespace, pod";
  std::set<uint64_t> means;
  // The same library mapped at the same place in several processes is one
  // mapping here.
  std::set<std::tuple<std::string, uint64_t, uint64_t, uint64_t>> seen_mappings;
  for (const ProcessEntry& e : snap.processes) {
    const ProcessIdentity& id = e.process.identity;
    std::vector<std::pair<std::string, std::string>> labels = {{"comm", id.comm}};
    if (id.pod_namespace) labels.emplace_back("namespace", *id.pod_namespace);
    if (id.pod_name) labels.emplace_back("pod", *id.pod_name);
    add_sites(e.snapshot, in, labels,
              {{"pid", id.pid}, {"start_time", static_cast<int64_t>(id.start_time)}});
    for (const PprofMapping& m : e.snapshot.mappings) {
      if (seen_mappings.emplace(m.path, m.start, m.limit, m.file_offset).second) in.mappings.push_back(m);
    }
    if (e.snapshot.sample_mean_bytes > 0) means.insert(e.snapshot.sample_mean_bytes);
    const double attached = std::chrono::duration<double>(e.process.attached_at.time_since_epoch()).count();
    if (attached > 0) {
      const int64_t span = static_cast<int64_t>((snap.timestamp - attached) * 1e9);
      in.duration_nanos = std::max(in.duration_nanos, span);
    }
  }
  if (!means.empty()) {
    // One period per profile: exact when every sampled process uses the
    // same mean; the comment says when they differ.
    in.sampled = means.size() == 1;
    in.sample_rate_bytes = static_cast<double>(*means.begin());
    in.comment += "; heap values of sampled processes are estimates (means";
    for (uint64_t m : means) in.comment += " " + std::to_string(m);
    in.comment += " bytes)";
  }
  return in;
}

}  // namespace lw
