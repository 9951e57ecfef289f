// SPDX-License-Identifier: Apache-2.0
#include "engine/stack_resolver.h"

#include <sys/sysmacros.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "core/platform/clock.h"
#include "core/platform/fd.h"
#include "core/symbols/elf_file.h"
#include "core/symbols/python_frames.h"
#include "core/symbols/stack_frames.h"
#include "core/symbols/stack_id.h"

namespace lw {

namespace {

// The mapping of the object (kernel device, inode) in `maps`, preferring an
// executable one.
const MapEntry* find_object_mapping(const ParsedMaps& maps, uint32_t dev, uint64_t ino) {
  const MapEntry* any = nullptr;
  for (const MapEntry& m : maps.entries) {
    if (m.inode != ino || kernel_dev(m.dev_major, m.dev_minor) != dev) continue;
    if (m.executable) return &m;
    if (!any) any = &m;
  }
  return any;
}

std::string map_files_path(pid_t pid, const MapEntry& m) {
  char buf[96];
  snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m.start, m.end);
  return buf;
}

}  // namespace

StackResolver::StackResolver(StackGcPass& stacks, const UnwindTables* unwind)
    : stacks_(stacks), unwind_(unwind) {
  configure_symbols(SymbolsConfig{});
}

void StackResolver::configure_symbols(const SymbolsConfig& config) {
  // The perf-map limits apply to maps opened from now on; they alone do
  // not restart the symbol thread (and drop its caches).
  SymbolsConfig same_maps = config;
  same_maps.perf_map_max_file_bytes = symbols_config_.perf_map_max_file_bytes;
  same_maps.perf_map_max_memory_bytes = symbols_config_.perf_map_max_memory_bytes;
  const bool unchanged = symbols_ && same_maps == symbols_config_;
  symbols_config_ = config;
  if (unchanged) return;
  symbols_.reset();  // joins the old thread before the new one starts
  symbols_ = std::make_unique<SymbolService>(symbol_service_options(config));
}

// With the build-id in the ModuleRef, the symbolizer shares one parsed
// module among every process mapping the same file (500 workers, one libc).
// Headers and notes only (no symbol index): this runs on the consumer thread.
const std::string& StackResolver::build_id_of(const MapEntry& m, const std::string& open_path) {
  auto key = std::make_tuple(m.dev_major, m.dev_minor, m.inode);
  auto it = build_ids_.find(key);
  if (it != build_ids_.end()) return it->second;
  static const std::string kUnknown;
  Result<int> fd = open_untrusted_file(open_path);
  if (!fd) return kUnknown;  // not cached: the next process may open it
  Fd owned(*fd);
  auto elf = ElfFile::open_fd(owned.get(), open_path, ElfOpenOptions{.index_symbols = false});
  if (!elf) return kUnknown;
  if (build_ids_.size() >= kMaxBuildIdCache) build_ids_.clear();
  return build_ids_.emplace(key, (*elf)->build_id()).first->second;
}

// Frames from the symbol service where it has them, module+offset where not
// yet (docs/architecture.md, "Symbolization"). The generation is read
// first: results published during the lookups are seen at the next call.
// JIT frames are named from `jit`, the process's perf map (null: none), and
// keep the name they got first: the code at their address when the stack
// was seen (decision jit-perf-maps). `jit_final`: the process is gone, its
// map will not grow.
void StackResolver::render_symbols(ResolvedStack& rs, const PerfMap* jit, bool jit_final) {
  rs.symbols_generation = symbols_->generation();
  rs.symbols_pending = false;
  rs.jit_pending = false;
  rs.jit_generation = jit ? jit->generation() : 0;
  rs.symbols_missing.clear();
  rs.frames.clear();
  std::vector<size_t> starts;  // where each address's frames begin (inline chains)
  starts.reserve(rs.addresses.size());
  for (StackAddress& a : rs.addresses) {
    starts.push_back(rs.frames.size());
    if (!a.mapped) {
      if (a.jit && a.unmapped.function.empty()) {
        auto named = jit ? jit->lookup(a.unmapped.offset) : std::nullopt;
        if (named) {
          a.unmapped.function = std::string(named->name);
          a.unmapped.language = "jit";
        } else {
          rs.jit_pending = rs.jit_pending || !jit_final;
        }
      }
      rs.frames.push_back(a.unmapped);
      continue;
    }
    SymbolService::Lookup found = symbols_->lookup(a.module, a.offset);
    if (found.frames != nullptr) {
      for (const Frame& fr : *found.frames) {
        rs.frames.push_back(fr);
        rs.frames.back().unwound = a.unwound;
      }
      rs.symbols_pending = rs.symbols_pending || found.provisional;
      if (rs.symbols_missing.empty()) rs.symbols_missing = found.missing;
      continue;
    }
    Frame f;
    f.module = a.module.path;
    f.build_id = a.module.build_id;
    f.offset = a.offset;
    f.unwound = a.unwound;
    rs.frames.push_back(std::move(f));
    rs.symbols_pending = true;
  }
  // Python frames where the evaluation loop's frames were
  // (decision python-frames).
  if (!rs.python.empty())
    rs.frames = merge_python_frames_grouped(rs.frames, starts, rs.is_eval, rs.python, rs.python_entry);
  if (!rs.symbols_pending && !rs.jit_pending) {
    rs.addresses.clear();
    rs.addresses.shrink_to_fit();
    rs.python.clear();
    rs.python_entry.clear();
    rs.is_eval.clear();
  }
}

void StackResolver::note_build_ids(TracedProcess& proc) {
  for (const MapEntry& m : proc.maps.entries) {
    if (!m.executable || !m.is_file()) continue;
    auto key = std::make_tuple(m.dev_major, m.dev_minor, m.inode);
    if (proc.build_ids.count(key)) continue;
    auto cached = build_ids_.find(key);
    if (cached == build_ids_.end() && proc.exited) continue;  // too late to read it
    proc.build_ids.emplace(key, cached != build_ids_.end() ? cached->second
                                                          : build_id_of(m, map_files_path(proc.pid, m)));
  }
}

StackResolver::Located StackResolver::locate(const TracedProcess& proc, const StoredFrame& f) const {
  Located l;
  if (f.ino) {
    // Mapped from overlayfs, the object is its layer file to the BPF side
    // and the overlay file to /proc/PID/maps (core/symbols/overlay.h).
    l.map = find_object_mapping(proc.maps, f.dev, f.ino);
    if (!l.map && unwind_) {
      for (const auto& [dev, ino] : unwind_->user_identities(f.dev, f.ino))
        if ((l.map = find_object_mapping(proc.maps, dev, ino))) break;
    }
    l.offset = f.addr;
  } else {
    l.map = find_mapping(proc.maps, f.addr);
    l.offset = l.map && l.map->is_file() ? f.addr - l.map->start + l.map->offset : f.addr;
  }
  return l;
}

std::vector<StackResolver::Located> StackResolver::locate_all(const TracedProcess& proc,
                                                              const StoredStack& stored) const {
  std::vector<Located> where;
  where.reserve(stored.frames.size());
  for (const StoredFrame& f : stored.frames) where.push_back(locate(proc, f));
  return where;
}

bool StackResolver::maps_miss_frames(TracedProcess& proc) {
  const std::vector<SiteStats>& sites = proc.heap.sites();
  if (proc.sites_checked > sites.size()) proc.sites_checked = 0;  // the tracker was cleared (exec)
  const size_t end = std::min(sites.size(), proc.sites_checked + kMaxSitesCheckedPerPoll);
  for (size_t i = proc.sites_checked; i < end; ++i) {
    const uint64_t hash = sites[i].stack_hash;
    if (hash == 0 || hash == LW_STACK_HEAP_REGROWN || proc.stacks.count(hash)) continue;
    const StoredStack stored = stacks_.peek_stack(hash);
    for (const StoredFrame& f : stored.frames) {
      if (locate(proc, f).map) continue;
      // One read of the maps serves every site recorded so far.
      proc.sites_checked = sites.size();
      return true;
    }
  }
  proc.sites_checked = end;
  return false;
}

// The leaf is the allocator's caller: frames inside the probed functions
// themselves (operator new calling malloc, the mmap wrapper around its
// syscall) are not the site (decision cfi-unwinding).
size_t StackResolver::site_frame(const TracedProcess& proc, const StoredStack& stored,
                                 const std::vector<Located>& where) {
  size_t first = 0;
  if (!proc.attacher) return first;
  auto probed = [&](size_t i) {
    return where[i].map && where[i].map->is_file() &&
           proc.attacher->in_probed_function(kernel_dev(where[i].map->dev_major, where[i].map->dev_minor),
                                             where[i].map->inode, where[i].offset);
  };
  while (first + 1 < where.size() && probed(first)) ++first;
  // When the operator new that called malloc was called by another new
  // (libstdc++'s nothrow new calls new), the walk goes through the outer
  // new's frame and reaches its caller again, after the hint that named
  // it: site (hint), operator new(nothrow), site. The caller once.
  if (first < where.size() && stored.frames[first].how == LW_UNWOUND_HINT) {
    const StoredFrame& hint = stored.frames[first];
    for (size_t j = first + 1; j < where.size(); ++j) {
      const StoredFrame& f = stored.frames[j];
      if (f.ino == hint.ino && f.dev == hint.dev && f.addr == hint.addr) {
        first = j;
        break;
      }
      if (!probed(j)) break;
    }
  }
  return first;
}

StackAddress StackResolver::address_of(const TracedProcess& proc, const StoredFrame& stored, const Located& l,
                                       Frame& f) {
  const MapEntry* m = l.map;
  StackAddress a;
  a.unwound = unwound_name(stored.how);
  if (m && m->is_file()) {
    a.mapped = true;
    a.module.path = m->path;
    a.module.open_path = map_files_path(proc.pid, *m);
    a.module.inode = m->inode;
    a.module.dev = makedev(m->dev_major, m->dev_minor);
    // The path in the target's root once map_files is gone (it exited),
    // and the first place debug files are searched.
    a.module.root = "/proc/" + std::to_string(proc.pid) + "/root";
    // As captured while the process lived: after its exit, the build-id is
    // what lets the symbolizer trust the file on disk at `path`.
    auto captured = proc.build_ids.find(std::make_tuple(m->dev_major, m->dev_minor, m->inode));
    a.module.build_id = captured != proc.build_ids.end() && !captured->second.empty()
                            ? captured->second
                            : build_id_of(*m, a.module.open_path);
    a.offset = l.offset;
    f.module = a.module.path;
    f.build_id = a.module.build_id;
    f.offset = a.offset;
  } else {
    f.module = m ? m->path : "[unknown]";
    f.offset = stored.ino ? stored.addr : l.offset;
    f.unwound = a.unwound;
    a.unmapped = f;
    a.jit = !stored.ino && m && m->executable;  // anonymous code: a runtime's JIT
  }
  return a;
}

// The process's perf map, read again when kPerfMapReadIntervalNs passed
// since the last read; opened at the first JIT frame (decision
// jit-perf-maps). Null once the process is gone without one.
const PerfMap* StackResolver::jit_names(TracedProcess& proc) {
  if (!proc.perf_map) {
    if (proc.exited) return nullptr;
    PerfMapLimits limits;
    limits.max_file_bytes = symbols_config_.perf_map_max_file_bytes;
    limits.max_memory_bytes = symbols_config_.perf_map_max_memory_bytes;
    proc.perf_map = std::make_unique<PerfMapFile>(proc.pid, limits);
  }
  const uint64_t now = monotonic_ns();
  if (!proc.exited && (proc.perf_map_read_ns == 0 || now - proc.perf_map_read_ns >= kPerfMapReadIntervalNs)) {
    proc.perf_map_read_ns = now;
    proc.perf_map->refresh();
  }
  return &proc.perf_map->map();
}

void StackResolver::splice_python_frames(TracedProcess& proc, const StoredStack& stored,
                                         const std::vector<bool>& is_eval, std::vector<Frame>& physical,
                                         ResolvedStack& rs) {
  if (!proc.python) return;
  std::vector<bool> entry;
  std::vector<Frame> python = proc.python->resolve(stored.py, entry);
  if (!python.empty()) {
    // The id hashes the merged stack (Python frames as file, name, line);
    // render_symbols() splices the same frames into each rendering.
    physical = merge_python_frames(physical, is_eval, python, entry);
    rs.python = std::move(python);
    rs.python_entry = std::move(entry);
    rs.is_eval = is_eval;
  }
  // A native stack that is complete but whose Python chain was cut says so.
  const uint32_t py_end = stored.py_flags & LW_PY_END_MASK;
  if (rs.end.empty() && py_end == LW_PY_DEPTH) rs.end = "python_depth";
  if (rs.end.empty() && py_end == LW_PY_READ_FAILED) rs.end = "python_read_failed";
}

const ResolvedStack& StackResolver::resolve(TracedProcess& proc, uint64_t stack_hash) {
  auto it = proc.stacks.find(stack_hash);
  if (it != proc.stacks.end()) {
    ResolvedStack& cached = it->second;
    // Its bytes as rendered again (decision process-cost).
    const uint64_t before = proc.stacks_bytes - resolved_stack_bytes(cached);
    if (cached.symbols_pending && cached.symbols_generation != symbols_->generation()) {
      render_symbols(cached, proc.perf_map ? &proc.perf_map->map() : nullptr, proc.exited);
      proc.stacks_bytes = before + resolved_stack_bytes(cached);
    } else if (cached.jit_pending) {
      const PerfMap* jit = jit_names(proc);
      if (proc.exited || !jit || jit->generation() != cached.jit_generation) {
        render_symbols(cached, jit, proc.exited);
        proc.stacks_bytes = before + resolved_stack_bytes(cached);
      }
    }
    return cached;
  }
  ResolvedStack rs;
  if (stack_hash == LW_STACK_HEAP_REGROWN) {  // not walked (decision brk-emulated-probe)
    rs.frames = heap_regrown_frames();
    rs.stack_id = stable_stack_id(rs.frames);
    rs.end = "not_walked";
    proc.stacks_bytes += resolved_stack_bytes(rs);
    return proc.stacks.emplace(stack_hash, std::move(rs)).first->second;
  }
  const StoredStack stored = stacks_.read_stack(stack_hash);
  // Against the maps as the poll path left them (maps_miss_frames()).
  const std::vector<Located> where = locate_all(proc, stored);
  std::vector<Frame> physical;  // what the stack id hashes: (build-id, offset)
  std::vector<bool> is_eval;    // frames in CPython's evaluation loop (decision python-frames)
  for (size_t i = site_frame(proc, stored, where); i < where.size(); ++i) {
    const MapEntry* m = where[i].map;
    is_eval.push_back(proc.python && m && m->is_file() &&
                      proc.python->is_eval_frame(kernel_dev(m->dev_major, m->dev_minor), m->inode,
                                                 where[i].offset));
    Frame f;
    rs.addresses.push_back(address_of(proc, stored.frames[i], where[i], f));
    physical.push_back(std::move(f));
  }
  rs.end = stack_end_name(stored.flags & LW_STACK_END_MASK);
  if (!stored.py.empty() || stored.py_flags != LW_PY_NONE)
    splice_python_frames(proc, stored, is_eval, physical, rs);
  rs.stack_id = stable_stack_id(physical);
  const bool has_jit = std::any_of(rs.addresses.begin(), rs.addresses.end(),
                                   [](const StackAddress& a) { return a.jit; });
  render_symbols(rs, has_jit ? jit_names(proc) : nullptr, proc.exited);
  proc.stacks_bytes += resolved_stack_bytes(rs);
  return proc.stacks.emplace(stack_hash, std::move(rs)).first->second;
}

}  // namespace lw
