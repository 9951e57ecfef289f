// SPDX-License-Identifier: Apache-2.0
#include "engine/heap_walk.h"

#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "core/platform/log.h"
#include "core/proc/proc_maps.h"
#include "engine/process_attacher.h"
#include "engine/traced_process.h"

namespace lw {

namespace {

// glibc's chunk size flags (core/accounting/glibc_heap.h).
constexpr uint64_t kIsMmapped = 0x2;

// The process's "[heap]" mapping, (0, 0) when it has none.
std::pair<uint64_t, uint64_t> heap_mapping(pid_t pid) {
  if (Result<ParsedMaps> maps = read_proc_maps(pid); maps)
    for (const MapEntry& m : maps->entries)
      if (m.path == "[heap]") return {m.start, m.end};
  return {0, 0};
}

// process_vm_readv of the whole range: 0, EFAULT (not mapped, or partly),
// or the call's errno.
int read_target(pid_t pid, uint64_t addr, void* out, size_t len) {
  if (len == 0) return 0;
  if (addr + len < addr) return EFAULT;
  iovec local{out, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(len)) return 0;
  return n >= 0 || errno == EFAULT ? EFAULT : errno;
}

// GLIBC_TUNABLES from the process's environment ("" when it sets none).
std::string glibc_tunables(pid_t pid) {
  const std::string env = read_bounded("/proc/" + std::to_string(pid) + "/environ", kMaxEnvironBytes);
  constexpr std::string_view kName = "GLIBC_TUNABLES=";
  for (size_t at = 0; at < env.size();) {
    const size_t end = std::min(env.find('\0', at), env.size());
    const std::string_view var(env.data() + at, end - at);
    if (var.substr(0, kName.size()) == kName) return std::string(var.substr(kName.size()));
    at = end + 1;
  }
  return "";
}

void retire_all(TracedProcess& p, BpfSession& session, const std::vector<ThinnedRecord>& freed,
                const std::vector<ThinnedRecord>& undecided) {
  HeapWalkView& v = p.walk.view;
  for (const ThinnedRecord& r : freed)
    if (p.heap.retire(r.addr, r.alloc_ns, false)) ++v.freed;
  const uint64_t before = p.heap.counters().walk_undecided_bytes;
  for (const ThinnedRecord& r : undecided)
    if (p.heap.retire(r.addr, r.alloc_ns, true)) ++v.undecided;
  v.undecided_bytes += p.heap.counters().walk_undecided_bytes - before;
  std::vector<ThinnedRecord> gone = freed;
  gone.insert(gone.end(), undecided.begin(), undecided.end());
  if (!gone.empty()) session.delete_live(p.pid, LW_KIND_HEAP, gone);
}

// Why a record could not be marked (counted for the debug log).
enum MarkMiss { kMissRead, kMissSmall, kMissFoot, kMissCount };

// The mark of the live chunk at user address addr, or nullopt (`miss` says
// why) when it cannot be followed (see heap_walk.h).
std::optional<HeapMark> mark_of(pid_t pid, uint64_t addr, uint64_t alloc_ns, uint64_t small_chunk_max,
                                MarkMiss* miss) {
  uint64_t hdr[4];  // prev_size, size, the first 16 bytes of the block
  *miss = kMissRead;
  if (addr < 16 || read_target(pid, addr - 16, hdr, sizeof hdr) != 0) return std::nullopt;
  const uint64_t flags = hdr[1] & 7, chunk = hdr[1] & ~uint64_t{7};
  HeapMark m;
  m.alloc_ns = alloc_ns;
  m.head[0] = hdr[2];
  m.head[1] = hdr[3];
  m.mmapped = (flags & kIsMmapped) != 0;
  if (m.mmapped) return m;
  *miss = kMissSmall;
  if (chunk <= small_chunk_max) return std::nullopt;  // tcache or a fastbin keep it "in use" when freed
  *miss = kMissRead;
  if (read_target(pid, addr - 16 + chunk, &m.foot, sizeof m.foot) != 0) return std::nullopt;
  *miss = kMissFoot;
  if (m.foot == chunk) return std::nullopt;  // a free writes the size there: it would not show
  return m;
}

}  // namespace

bool heap_walkable(const TracedProcess& p) {
  if (!p.attacher) return false;
  // malloc and free must be libc.so.6's own: an allocator preloaded or
  // linked in takes the "libc" role too (whoever exports them first), and
  // its blocks have no glibc chunk headers.
  auto has = [](const AttachedObject& o, std::string_view fn) {
    for (const ProbeReport& r : o.probes)
      for (size_t at = 0; at <= r.symbols.size();) {
        const size_t end = std::min(r.symbols.find(',', at), r.symbols.size());
        if (std::string_view(r.symbols).substr(at, end - at) == fn) return true;
        at = end + 1;
      }
    return false;
  };
  bool malloc_here = false, free_here = false;
  for (const AttachedObject& o : p.attacher->objects()) {
    if (!o.map) continue;  // not an allocator object
    if (o.role != "libc") return false;  // jemalloc, tcmalloc, mimalloc: not proven
    const std::string_view base = std::string_view(o.path).substr(o.path.rfind('/') + 1);
    const bool glibc = base.substr(0, 7) == "libc.so";
    for (std::string_view fn : {"malloc", "free", "calloc", "realloc", "posix_memalign", "memalign", "aligned_alloc"})
      if (has(o, fn) && !glibc) return false;
    malloc_here = malloc_here || (glibc && has(o, "malloc"));
    free_here = free_here || (glibc && has(o, "free"));
  }
  return malloc_here && free_here;
}

void mark_heap_records(TracedProcess& p, BpfSession& session) {
  HeapWalkState& w = p.walk;
  if (w.small_chunk_max == 0) {
    const std::string tunables = glibc_tunables(p.pid);
    w.small_chunk_max = glibc_small_chunk_max(tunables);
    w.mmap_rounding = glibc_mmap_rounding(tunables);
  }
  // A record the last walk did not reach keeps its mark: it may have been
  // freed before the free side came back, and a mark taken now would be of
  // what is there now.
  std::unordered_map<uint64_t, HeapMark> old = std::move(w.marks);
  w.marks.clear();
  std::vector<ThinnedRecord> undecided;
  uint64_t misses[kMissCount] = {};
  p.heap.for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
    if (r.kind != LW_KIND_HEAP) return;
    std::optional<HeapMark> m;
    MarkMiss miss = kMissRead;
    if (auto it = old.find(addr); it != old.end() && it->second.alloc_ns == r.alloc_ns && it->second.unreached > 0)
      m = it->second;
    else if (w.marks.size() < kMaxHeapMarks)
      m = mark_of(p.pid, addr, r.alloc_ns, w.small_chunk_max, &miss);
    if (m) {
      w.marks.emplace(addr, *m);
    } else {
      ++misses[miss];
      undecided.push_back({addr, r.alloc_ns});
    }
  });
  w.view.marked = w.marks.size();
  LW_LOG_DEBUG("heap marks of pid %d: %zu marked; undecided: %llu small, %llu size already in prev_size, %llu "
               "unreadable or past the cap",
               p.pid, w.marks.size(), static_cast<unsigned long long>(misses[kMissSmall]),
               static_cast<unsigned long long>(misses[kMissFoot]), static_cast<unsigned long long>(misses[kMissRead]));
  retire_all(p, session, {}, undecided);
}

namespace {

// Whether a block the walk found live still carries its mark.
bool mark_holds(pid_t pid, uint64_t addr, const HeapMark& m) {
  uint64_t head[2];
  if (read_target(pid, addr, head, sizeof head) != 0 || head[0] != m.head[0] || head[1] != m.head[1])
    return false;
  if (m.mmapped) return true;
  uint64_t size = 0, foot = 0;
  if (read_target(pid, addr - 8, &size, sizeof size) != 0) return false;
  const uint64_t chunk = size & ~uint64_t{7};
  return read_target(pid, addr - 16 + chunk, &foot, sizeof foot) == 0 && foot == m.foot;
}

}  // namespace

void settle_heap_records(TracedProcess& p, BpfSession& session, uint64_t max_read_bytes) {
  HeapWalkState& w = p.walk;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint64_t> addrs;
  std::vector<HeapCandidate> candidates;
  p.heap.for_each_live_at([&](uint64_t addr, const LiveRecord& r) {
    if (r.kind != LW_KIND_HEAP) return;
    auto it = w.marks.find(addr);
    // A record with no mark (or another allocation's) was made after the
    // window: none can be, the allocating side being parked, but a queued
    // event may land late. It is left as it is, seen by the probes since.
    if (it == w.marks.end() || it->second.alloc_ns != r.alloc_ns) return;
    addrs.push_back(addr);
    candidates.push_back({addr, r.size});
  });
  const auto [heap_start, heap_end] = heap_mapping(p.pid);
  GlibcHeapLimits limits;
  // The break moves while a busy process is walked (glibc_heap.h).
  limits.heap_end_now = [pid = p.pid] { return heap_mapping(pid).second; };
  limits.max_read_bytes = max_read_bytes;
  limits.small_chunk_max = w.small_chunk_max;
  limits.mmap_rounding = w.mmap_rounding;
  GlibcWalkStats stats;
  const pid_t pid = p.pid;
  const HeapReader reader = [pid](uint64_t a, void* out, size_t n) { return read_target(pid, a, out, n); };
  const std::vector<Liveness> verdicts = check_glibc_chunks(reader, heap_start, heap_end, candidates, limits, &stats);
  std::vector<ThinnedRecord> freed, undecided;
  uint64_t kept = 0, mark_changed = 0;
  uint64_t unreached = 0;
  for (size_t i = 0; i < addrs.size(); ++i) {
    HeapMark& m = w.marks.at(addrs[i]);
    Liveness v = verdicts[i];
    // Not reached by a stopped walk: as it was, for a walk or two more.
    const bool in_heap = addrs[i] >= heap_start && addrs[i] < heap_end;
    if (v == Liveness::kUndecided && !stats.complete && in_heap && addrs[i] - 16 >= stats.main_reached &&
        ++m.unreached < kMaxUnreachedWalks) {
      ++unreached;
      continue;
    }
    if (v != Liveness::kUndecided) m.unreached = 0;
    if (v == Liveness::kLive && !mark_holds(pid, addrs[i], m)) {
      v = Liveness::kUndecided;
      ++mark_changed;
    }
    if (v == Liveness::kLive) ++kept;
    else (v == Liveness::kFreed ? freed : undecided).push_back({addrs[i], m.alloc_ns});
  }
  LW_LOG_DEBUG("heap walk of pid %d: %zu records: %llu live, %zu freed, %zu undecided (%llu marks changed), "
               "%llu not reached; %llu bytes read%s%s",
               pid, addrs.size(), static_cast<unsigned long long>(kept), freed.size(), undecided.size(),
               static_cast<unsigned long long>(mark_changed), static_cast<unsigned long long>(unreached),
               static_cast<unsigned long long>(stats.bytes_read),
               stats.complete ? "" : "; stopped: ", stats.stopped.c_str());
  // The kept keep their marks: a walk while parked is followed by others.
  for (const ThinnedRecord& r : freed) w.marks.erase(r.addr);
  for (const ThinnedRecord& r : undecided) w.marks.erase(r.addr);
  retire_all(p, session, freed, undecided);
  HeapWalkView& view = w.view;
  ++view.walks;
  view.kept = kept;
  view.last_bytes_read = stats.bytes_read;
  view.last_complete = stats.complete;
  view.last_stopped = stats.stopped;
  view.last_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace lw
