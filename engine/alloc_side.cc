// SPDX-License-Identifier: Apache-2.0
// The allocating and the free side of an allocator object's probes, in
// links of their own, so that between two bursts the allocating side can go
// while the free side stays (decision busy-processes).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/platform/fd.h"
#include "core/proc/procfs.h"
#include "engine/process_attacher.h"

namespace lw {

void mark_parked(AttachedObject& o, const std::vector<UprobeSpec>& side, bool parked) {
  for (ProbeReport& r : o.probes)
    if (std::any_of(side.begin(), side.end(), [&](const UprobeSpec& u) { return u.file_offset == r.file_offset; }))
      r.parked = parked;
}

bool frees_in_drain(uint32_t func) {
  return func == LW_FUNC_FREE || func == LW_FUNC_REALLOC || func == LW_FUNC_REALLOCARRAY ||
         func == LW_FUNC_REALLOCF || func == LW_FUNC_HEAP_REALLOC;
}

void ProcessAttacher::split_alloc_side(ObjectSpecs& specs, AttachedObject& obj) {
  std::vector<UprobeSpec> free_side;
  for (const UprobeSpec& e : specs.entries)
    (frees_in_drain(e.func) ? free_side : obj.alloc_entries).push_back(e);
  obj.free_entries = free_side;
  specs.entries = std::move(free_side);
  obj.alloc_returns = std::move(specs.returns);
  specs.returns.clear();
}

Status ProcessAttacher::attach_alloc_links(const std::string& fd_path, AttachedObject& obj) {
  Result<std::vector<Link>> entries = session_.attach_uprobes(pid_, fd_path, obj.alloc_entries, false);
  if (!entries) return entries.error();
  Result<std::vector<Link>> returns = session_.attach_uprobes(pid_, fd_path, obj.alloc_returns, true);
  if (!returns) {
    destroy_links(std::move(*entries));
    return returns.error();
  }
  obj.alloc_links = std::move(*entries);
  for (Link& l : *returns) obj.alloc_links.push_back(std::move(l));
  return ok_status();
}

std::vector<Link> ProcessAttacher::park_alloc_side() {
  alloc_parked_ = true;
  std::vector<Link> links;
  for (AttachedObject& o : objects_) {
    for (Link& l : o.alloc_links) links.push_back(std::move(l));
    o.alloc_links.clear();
    mark_parked(o, o.alloc_entries, true);
    mark_parked(o, o.alloc_returns, true);
  }
  return links;
}

Status ProcessAttacher::unpark_alloc_side() {
  alloc_parked_ = false;
  Status first = ok_status();
  for (AttachedObject& o : objects_) {
    if (!o.map || !o.alloc_links.empty() || (o.alloc_entries.empty() && o.alloc_returns.empty())) continue;
    Result<int> fd_or = open_mapped_file(pid_, *o.map);
    Status st = fd_or ? ok_status() : Status(fd_or.error());
    if (fd_or) {
      Fd fd(*fd_or);
      st = attach_alloc_links("/proc/self/fd/" + std::to_string(fd.get()), o);
    }
    if (st) {
      mark_parked(o, o.alloc_entries, false);
      mark_parked(o, o.alloc_returns, false);
    }
    if (!st && first) first = Error{st.error().code, o.path + ": " + st.error().message};
  }
  return first;
}

std::vector<Link> ProcessAttacher::park_free_side() {
  free_parked_ = true;
  std::vector<Link> links;
  for (AttachedObject& o : objects_) {
    if (!o.map || o.free_entries.empty()) continue;  // not an allocator object
    for (Link& l : o.links) links.push_back(std::move(l));
    o.links.clear();
    mark_parked(o, o.free_entries, true);
  }
  return links;
}

Status ProcessAttacher::unpark_free_side() {
  free_parked_ = false;
  Status first = ok_status();
  for (AttachedObject& o : objects_) {
    if (!o.map || o.free_entries.empty() || !o.links.empty()) continue;
    Result<int> fd_or = open_mapped_file(pid_, *o.map);
    Status st = fd_or ? ok_status() : Status(fd_or.error());
    if (fd_or) {
      Fd fd(*fd_or);
      Result<std::vector<Link>> links =
          session_.attach_uprobes(pid_, "/proc/self/fd/" + std::to_string(fd.get()), o.free_entries, false);
      if (links) o.links = std::move(*links);
      else st = links.error();
    }
    if (st) mark_parked(o, o.free_entries, false);
    if (!st && first) first = Error{st.error().code, o.path + ": " + st.error().message};
  }
  return first;
}

}  // namespace lw
