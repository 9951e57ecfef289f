// SPDX-License-Identifier: Apache-2.0
#include "engine/process_attacher.h"

#include "core/symbols/stack_frames.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "core/platform/clock.h"
#include "core/symbols/elf_file.h"
#include "core/platform/log.h"
#include "core/platform/fd.h"
#include "core/proc/procfs.h"
#include "core/probes/probe_placement.h"
#include "engine/cuda_probes.h"
#include "engine/python_process.h"
#include "core/platform/capabilities.h"
#include "core/accounting/cuda_devices.h"

namespace lw {

namespace {
constexpr size_t kMaxPreloadFileBytes = 64 << 10;
}  // namespace

std::string read_bounded(const std::string& path, size_t limit) {
  Result<int> opened = open_untrusted_file(path);
  if (!opened) return "";
  Fd fd(*opened);
  std::string out(limit, '\0');
  size_t got = 0;
  while (got < limit) {
    ssize_t r = read(fd.get(), out.data() + got, limit - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

namespace {



// Roles of the probe objects that are neither the allocator's nor CUDA's:
// they stay when the heap probes go (step-down, governor).
constexpr char kRoleSyscalls[] = "syscalls";
constexpr char kRoleLoader[] = "loader";

bool is_heap_role(const std::string& role) {
  return !is_cuda_role(role) && !is_tensor_role(role) && role != kRoleSyscalls && role != kRoleLoader;
}

// The libc system-call wrappers probed after their `syscall`
// (decision libc-syscall-wrappers), by the names glibc and musl give them.
// mremap is optional: a libc without it is not a reason to fall back to the
// tracepoints.
struct WrapperSpec {
  const char* names[3];
  uint32_t func;
  int nr;
  bool required;
};
constexpr WrapperSpec kWrappers[] = {
    {{"mmap", "mmap64", "__mmap"}, LW_FUNC_SYS_MMAP, 9, true},
    {{"munmap", "__munmap", nullptr}, LW_FUNC_SYS_MUNMAP, 11, true},
    {{"brk", "__brk", nullptr}, LW_FUNC_SYS_BRK, 12, true},
    {{"mremap", "__mremap", nullptr}, LW_FUNC_SYS_MREMAP, 25, false},
};

// The record of an object about to be probed, as the target maps it.
AttachedObject new_object(const MapEntry& m, const ElfFile& elf) {
  AttachedObject obj;
  obj.path = m.path;
  obj.dev = makedev(m.dev_major, m.dev_minor);
  obj.inode = m.inode;
  obj.build_id = elf.build_id();
  return obj;
}

const char* syscall_tracing_name(SyscallTracing s) {
  switch (s) {
    case SyscallTracing::kWrappers: return "wrappers";
    case SyscallTracing::kTracepoints: return "tracepoints";
    case SyscallTracing::kOff: return "off";
    case SyscallTracing::kPending: break;
  }
  return "pending";
}

}  // namespace

std::vector<Link> ProcessAttacher::take_links() {
  std::vector<Link> links;
  for (AttachedObject& o : objects_) {
    for (Link& l : o.links) links.push_back(std::move(l));
    for (Link& l : o.alloc_links) links.push_back(std::move(l));
    if (o.role != kRoleSyscalls && o.role != kRoleLoader) continue;
    const BpfSession::SharedKey key{o.dev, o.inode, o.role == kRoleLoader};
    if (o.shared) {
      for (Link& l : session_.release_shared_uprobes(key)) links.push_back(std::move(l));
    } else if (size_t& n = session_.per_pid_links(key); n > 0) {
      --n;
    }
  }
  objects_.clear();
  set_syscall_state(SyscallTracing::kPending, "probes detached");
  return links;
}

void ProcessAttacher::detach_all() { destroy_links(take_links()); }

bool ProcessAttacher::shared_syscall_link() const {
  return std::any_of(objects_.begin(), objects_.end(),
                     [](const AttachedObject& o) { return o.role == kRoleSyscalls && o.shared; });
}

int sole_cuda_device_of(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  // /dev/nvidiaN in the process's root: the directory is opened inside that
  // root (a container's symlink cannot point it at the host's), and at most
  // kMaxDevEntries entries are read.
  constexpr int kMaxDevEntries = 65536;
  int nodes = -1;
  Result<int> fd = open_dir_in_root(proc + "/root", "/dev");
  if (DIR* d = fd ? fdopendir(*fd) : nullptr) {
    nodes = 0;
    int seen = 0;
    while (dirent* de = readdir(d)) {
      if (++seen > kMaxDevEntries) {
        nodes = -1;
        break;
      }
      const char* n = de->d_name;
      if (std::strncmp(n, "nvidia", 6) != 0 || n[6] == '\0') continue;
      bool digits = true;
      for (const char* c = n + 6; *c; ++c) digits = digits && *c >= '0' && *c <= '9';
      nodes += digits;
    }
    closedir(d);
  } else if (fd) {
    close(*fd);
  }
  return sole_cuda_device(
      max_visible_cuda_devices(read_bounded(proc + "/environ", kMaxEnvironBytes), nodes));
}

Status ProcessAttacher::attach_new_objects(bool place_probes) {
  loader_attached_now_ = false;
  Status st = scan_and_attach(place_probes);
  // ld.so's hook was just placed: a link-map change between reading the
  // maps and placing it (the loader mapping libc right after the exec) was
  // not reported, so look once more while anything is still pending.
  if (st && loader_attached_now_ &&
      (info_.support == support_name(Support::kPending) || syscall_state_ == SyscallTracing::kPending))
    st = scan_and_attach(place_probes);
  return st;
}

// The executable, by the path and inode /proc/PID/exe names.
struct ProcessAttacher::ExeIdentity {
  struct stat st {};
  bool have = false;
  int error = 0;     // errno of the stat when !have
  std::string path;  // without " (deleted)"
};

ProcessAttacher::ExeIdentity ProcessAttacher::exe_identity(const std::string& proc) {
  ExeIdentity exe;
  exe.have = stat((proc + "/exe").c_str(), &exe.st) == 0;
  exe.error = exe.have ? 0 : errno;
  char exe_link[4096];
  ssize_t n = readlink((proc + "/exe").c_str(), exe_link, sizeof(exe_link) - 1);
  exe.path = n > 0 ? std::string(exe_link, static_cast<size_t>(n)) : "";
  const std::string deleted = " (deleted)";
  if (exe.path.size() > deleted.size() &&
      exe.path.compare(exe.path.size() - deleted.size(), deleted.size(), deleted) == 0)
    exe.path.resize(exe.path.size() - deleted.size());
  return exe;
}

namespace {

PreloadList read_preload(const std::string& proc) {
  PreloadList preload;
  preload.names = parse_ld_preload_environ(read_bounded(proc + "/environ", kMaxEnvironBytes));
  for (std::string& name :
       parse_ld_so_preload(read_bounded(proc + "/root/etc/ld.so.preload", kMaxPreloadFileBytes)))
    preload.names.push_back(std::move(name));
  return preload;
}

}  // namespace

ProcessAttacher::ObjectScan ProcessAttacher::scan_objects(const ParsedMaps& maps, const ExeIdentity& exe) {
  // Every mapped ELF object, once, in address order. Only objects with an
  // executable mapping can hold code; data files (locale archives) are
  // never opened.
  ObjectScan scan;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const MapEntry& m : maps.entries) {
    if (!m.is_file() || !m.executable) continue;
    std::pair<uint64_t, uint64_t> key{makedev(m.dev_major, m.dev_minor), m.inode};
    if (!seen.insert(key).second) continue;
    auto cached = elf_cache_.find(key);
    std::shared_ptr<const ElfFile> elf;
    if (cached != elf_cache_.end()) {
      elf = cached->second;
    } else {
      if (Result<int> fd = open_mapped_file(pid_, m)) {
        Fd owned(*fd);
        if (auto parsed = ElfFile::open_fd(owned.get(), m.path)) elf = *parsed;
      } else if ((fd.error().code == EPERM || fd.error().code == EACCES) && !scan.open_denied) {
        scan.open_denied = fd.error();  // names the missing capability
      }
      elf_cache_[key] = elf;  // nullptr too: not retried on every rescan
    }
    if (!scan.exe && ((!exe.path.empty() && m.path == exe.path) || (exe.have && m.inode == exe.st.st_ino)))
      scan.exe = scan.objects.size();
    scan.objects.push_back({m.path, std::move(elf)});
    scan.entries.push_back(m);
  }
  return scan;
}

Status ProcessAttacher::no_executable(const std::string& proc, int exe_errno,
                                      const std::optional<Error>& open_denied) {
  if (kill(pid_, 0) != 0 && errno == ESRCH)
    return Error{ESRCH, "no such process: " + std::to_string(pid_)};
  // Not allowed to look: a permission problem, not an unsupported process.
  if (exe_errno == EACCES || exe_errno == EPERM) {
    std::string missing = missing_capabilities({CAP_SYS_PTRACE});
    return Error{EPERM, "permission denied reading " + proc + "/exe" +
                            (missing.empty() ? std::string()
                                             : ": missing " + missing +
                                                   " (needed to read another user's /proc/PID)")};
  }
  if (open_denied) return *open_denied;
  info_.support = support_name(Support::kUnsupported);
  info_.reason = "the executable is not among the process's mappings";
  return ok_status();
}

void ProcessAttacher::record_plan(const AllocatorPlan& plan, const std::vector<LoadedObject>& objects,
                                  const PreloadList& preload) {
  info_.support = support_name(plan.support);
  info_.reason = plan.reason;
  info_.family = plan.family;
  info_.static_exe = plan.static_exe;
  info_.go = plan.go;
  // Not the entries' text (view/process_view.h, PreloadInfo).
  info_.preload = PreloadInfo{static_cast<uint32_t>(preload.names.size()), {}};
  for (const std::string& name : preload.names) {
    std::optional<size_t> i = match_object(objects, name);
    if (!i) continue;
    const std::string& mapped = objects[*i].path;
    info_.preload.objects.push_back({mapped.substr(mapped.rfind('/') + 1),
                                     objects[*i].elf ? objects[*i].elf->build_id() : std::string()});
  }
  info_.object.clear();
  info_.build_id.clear();
  if (plan.allocator) {
    info_.object = objects[*plan.allocator].path;
    info_.build_id = objects[*plan.allocator].elf->build_id();
  }
}

Status ProcessAttacher::attach_planned(const AllocatorPlan& plan, const ObjectScan& scan) {
  // Attach object by object, the allocator's own first: its failure is the
  // process's failure; another object's is logged in its reports.
  std::vector<size_t> order;
  if (plan.allocator) order.push_back(*plan.allocator);
  for (const PlannedProbe& p : plan.probes)
    if (std::find(order.begin(), order.end(), p.object) == order.end()) order.push_back(p.object);
  for (size_t i : order) {
    const MapEntry& m = scan.entries[i];
    uint64_t dev = makedev(m.dev_major, m.dev_minor);
    bool known = std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
      return o.inode == m.inode && o.dev == dev && is_heap_role(o.role);
    });
    if (known) continue;
    std::vector<const PlannedProbe*> probes;
    for (const PlannedProbe& p : plan.probes)
      if (p.object == i) probes.push_back(&p);
    if (probes.empty()) continue;
    Status st = attach_object(m, *scan.objects[i].elf, probes);
    if (!st && plan.allocator && i == *plan.allocator) return st;
  }
  return ok_status();
}

Status ProcessAttacher::scan_and_attach(bool place_probes) {
  const uint64_t scan_start = monotonic_ns();
  Result<ParsedMaps> maps = read_proc_maps(pid_);
  if (!maps) return maps.error();
  const uint64_t maps_read = monotonic_ns();
  const std::string proc = "/proc/" + std::to_string(pid_);
  const ExeIdentity exe = exe_identity(proc);
  const ObjectScan scan = scan_objects(*maps, exe);
  // CUDA (optional, every mode): the runtime and driver libraries, and an
  // executable with the runtime linked in (found by symbol). Independent of
  // the allocator decision below, and never the process's failure.
  LW_LOG_DEBUG("attach stages pid %d: maps read %.3f ms, objects parsed %.3f ms (%zu objects)", pid_,
               (maps_read - scan_start) / 1e6, (monotonic_ns() - maps_read) / 1e6, scan.objects.size());
  if (cuda_) attach_cuda_objects(scan.objects, scan.entries, scan.exe);
  // The tensor tier (optional, every mode; decision tensor-tier).
  // Off (config, governor, kill switch): nothing attached, but what is
  // mapped is still said (the tracer shows "off" or "suspended").
  if (tensors_)
    attach_tensor_objects(scan);
  else
    refresh_tensor_info(scan);
  // ld.so's link-map hook: dlopen and the loading after an exec are seen
  // without any syscall tracepoint (rescans for new objects).
  if (cuda_ || tensors_ || syscalls_ || place_probes) attach_loader_objects(scan.objects, scan.entries);
  if (!scan.exe) return no_executable(proc, exe.error, scan.open_denied);

  const PreloadList preload = read_preload(proc);
  AllocatorPlan plan = plan_allocator_probes(scan.objects, *scan.exe, preload, probe_roles());
  if (syscalls_)
    attach_syscall_sites(scan.objects, scan.entries, plan.search, plan.static_exe);
  else
    set_syscall_state(SyscallTracing::kOff, "mmap accounting off for this process");
  record_plan(plan, scan.objects, preload);
  if (plan.support == Support::kUnsupported && scan.open_denied) return *scan.open_denied;
  if (plan.support == Support::kPending || plan.support == Support::kUnsupported) {
    refresh_functions();
    return ok_status();
  }
  if (!place_probes) {
    info_.reason = "heap probes off for this process (mode light)";
    refresh_functions();
    return ok_status();
  }
  Status result = attach_planned(plan, scan);
  refresh_functions();
  return result;
}

void ProcessAttacher::refresh_functions() {
  info_.functions.clear();
  info_.objects.clear();
  for (const AttachedObject& o : objects_) {
    // The mmap wrappers and ld.so's hook are reported by mmap_tracing and
    // the probe list, not as allocator functions.
    if (o.role == kRoleSyscalls || o.role == kRoleLoader || is_tensor_role(o.role) || o.probes.empty())
      continue;
    info_.objects.push_back(o.path);
    for (const ProbeReport& r : o.probes)
      if (r.attached) info_.functions.push_back(r.symbols);
  }
}

void ProcessAttacher::attach_cuda_objects(const std::vector<LoadedObject>& objects,
                                          const std::vector<MapEntry>& entries,
                                          std::optional<size_t> exe) {
  for (size_t i = 0; i < objects.size(); ++i) {
    const ElfFile* elf = objects[i].elf.get();
    if (elf == nullptr) continue;
    std::string role = cuda_library_role(objects[i].path);
    if (role.empty() && exe && i == *exe && elf->find_function(kCudaStaticMarker))
      role = kRoleCudaStatic;
    if (role.empty()) continue;
    const MapEntry& m = entries[i];
    const uint64_t dev = makedev(m.dev_major, m.dev_minor);
    if (std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
          return o.inode == m.inode && o.dev == dev && is_cuda_role(o.role);
        }))
      continue;
    // One planned probe per address: aliases (cuMemFree and cuMemFree_v2
    // in one function) share it.
    std::vector<PlannedProbe> planned;
    for (const CudaProbeSpec& c : cuda_probe_specs(role)) {
      std::optional<ElfSymbol> sym = elf->find_function(c.symbol);
      if (!sym) continue;
      auto same = std::find_if(planned.begin(), planned.end(),
                               [&](const PlannedProbe& p) { return p.symbol.vaddr == sym->vaddr; });
      if (same != planned.end()) {
        same->aliases.push_back(c.symbol);
        continue;
      }
      PlannedProbe p;
      p.object = i;
      p.role = role;
      p.spec = ProbeSpec{c.symbol, c.func, c.needs_return, false, false};
      p.symbol = *sym;
      planned.push_back(std::move(p));
    }
    if (planned.empty()) continue;
    std::vector<const PlannedProbe*> probes;
    for (const PlannedProbe& p : planned) probes.push_back(&p);
    (void)attach_object(m, *elf, probes, /*keep_on_failure=*/true);
  }
}

std::vector<Link> ProcessAttacher::take_links(bool heap, bool cuda, bool tensor) {
  std::vector<Link> links;
  auto taken = [&](const AttachedObject& o) {
    if (is_tensor_role(o.role)) return tensor;
    return is_cuda_role(o.role) ? cuda : is_heap_role(o.role) && heap;
  };
  for (AttachedObject& o : objects_)
    if (taken(o)) {
      for (Link& l : o.links) links.push_back(std::move(l));
      for (Link& l : o.alloc_links) links.push_back(std::move(l));
    }
  objects_.erase(std::remove_if(objects_.begin(), objects_.end(), taken), objects_.end());
  if (heap) alloc_parked_ = free_parked_ = false;  // attached again whole
  refresh_functions();
  return links;
}

void ProcessAttacher::set_syscall_state(SyscallTracing state, std::string reason) {
  syscall_state_ = state;
  info_.mmap_tracing = syscall_tracing_name(state);
  info_.mmap_tracing_reason = std::move(reason);
}

void ProcessAttacher::attach_loader_objects(const std::vector<LoadedObject>& objects,
                                            const std::vector<MapEntry>& entries) {
  for (size_t i = 0; i < objects.size(); ++i) {
    const ElfFile* elf = objects[i].elf.get();
    if (elf == nullptr) continue;
    std::optional<ElfSymbol> sym = elf->find_exported_function("_dl_debug_state");
    if (!sym) continue;
    const MapEntry& m = entries[i];
    const uint64_t dev = makedev(m.dev_major, m.dev_minor);
    if (std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
          return o.inode == m.inode && o.dev == dev && o.role == kRoleLoader;
        }))
      continue;
    std::optional<uint64_t> off = elf->vaddr_to_offset(sym->vaddr);
    if (!off) continue;
    ProbeReport r;
    r.symbols = sym->name;
    r.file_offset = *off;
    r.placement = "entry (ld.so link-map hook)";
    // Shared past the threshold like the wrappers
    // (decision shared-wrapper-links): making a link waits for a grace period
    // now and then (uprobe_register's dup_mmap_sem), 10-16 ms in one attach of
    // ten under churn. A process with its own link is counted twice at a
    // shared-link hit: a second rescan request, which is idempotent.
    const std::vector<UprobeSpec> spec = {{*off, LW_FUNC_DL_STATE, 0}};
    Status st = session_.per_pid_links({dev, m.inode, true}) >= shared_threshold_
                    ? attach_shared(m, *elf, kRoleLoader, {r}, spec, {})
                    : attach_fixed(m, *elf, kRoleLoader, {r}, spec);
    if (st) loader_attached_now_ = true;
  }
}

ProcessAttacher::WrapperProbes ProcessAttacher::wrapper_probes(const MapEntry& m, const ElfFile& elf) {
  WrapperProbes out;
  for (const WrapperSpec& w : kWrappers) {
    std::optional<ElfSymbol> sym;
    for (const char* name : w.names)
      if (name && (sym = elf.find_function(name))) break;
    std::string why = "not defined";
    std::vector<SyscallSite> sites;
    if (sym) sites = find_syscall_sites(elf, *sym, w.nr, &why);
    std::optional<ElfSymbol> curbrk;
    if (w.func == LW_FUNC_SYS_BRK && !sites.empty()) {
      curbrk = elf.find_data_object("__curbrk");
      if (!curbrk) {
        why = "no __curbrk (the break before the call is unknown)";
        sites.clear();
      }
    }
    if (sites.empty()) {
      if (w.required) {
        out.failure = std::string(w.names[0]) + " in " + m.path + ": " + why;
        return out;
      }
      continue;
    }
    if (std::optional<uint64_t> start = elf.vaddr_to_offset(sym->vaddr))
      out.ranges.emplace_back(*start, *start + std::max<uint64_t>(sym->size, 1));
    for (const SyscallSite& site : sites) {
      std::optional<uint64_t> off = elf.vaddr_to_offset(site.vaddr);
      if (!off) continue;
      ProbeReport r;
      r.symbols = sym->name;
      r.file_offset = *off;
      r.placement = site.reason;
      out.reports.push_back(std::move(r));
      UprobeSpec u{*off, w.func, 0};
      // Past glibc's store of the new break, the BPF side keeps the break
      // itself (decision brk-emulated-probe), seeded below.
      if (curbrk && !site.after_store) u.cookie_arg = static_cast<int64_t>(curbrk->vaddr - site.vaddr);
      if (curbrk && site.after_store) out.seed_curbrk = curbrk->vaddr;
      out.specs.push_back(u);
    }
  }
  return out;
}

void ProcessAttacher::attach_syscall_sites(const std::vector<LoadedObject>& objects,
                                           const std::vector<MapEntry>& entries,
                                           const SearchOrder& search, bool static_exe) {
  // Whose mmap does the process call? The first definition in the dynamic
  // linker's search order: libc, unless something interposes it (gperftools'
  // tcmalloc exports its own mmap, which makes the system call through
  // syscall(2), so libc's wrapper never runs).
  std::optional<size_t> definer;
  for (size_t i : search.order) {
    const ElfFile* elf = objects[i].elf.get();
    if (elf && (static_exe ? elf->find_function("mmap") : elf->find_exported_function("mmap"))) {
      definer = i;
      break;
    }
  }
  if (!definer) {
    if (!static_exe && !search.missing_needed.empty())
      set_syscall_state(SyscallTracing::kPending, "libc is not mapped yet");
    else
      set_syscall_state(SyscallTracing::kTracepoints, "no object defines mmap (Go or stripped static)");
    return;
  }
  const MapEntry& m = entries[*definer];
  const ElfFile& elf = *objects[*definer].elf;
  const uint64_t dev = makedev(m.dev_major, m.dev_minor);
  if (std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
        return o.inode == m.inode && o.dev == dev && o.role == kRoleSyscalls;
      })) {
    set_syscall_state(SyscallTracing::kWrappers, "");
    return;
  }
  WrapperProbes probes = wrapper_probes(m, elf);
  if (probes.failure) {
    set_syscall_state(SyscallTracing::kTracepoints, *probes.failure);
    return;
  }
  std::vector<ProbeReport>& reports = probes.reports;
  std::vector<std::pair<uint64_t, uint64_t>>& ranges = probes.ranges;
  const std::vector<UprobeSpec>& specs = probes.specs;
  const std::optional<uint64_t> seed_curbrk = probes.seed_curbrk;
  // sbrk is brk's wrapper (probed itself only in mode full): its frame is
  // the allocator's too, not the site.
  for (const char* name : {"sbrk", "__sbrk"})
    if (std::optional<ElfSymbol> sym = elf.find_function(name))
      if (std::optional<uint64_t> start = elf.vaddr_to_offset(sym->vaddr))
        ranges.emplace_back(*start, *start + std::max<uint64_t>(sym->size, 1));
  Status st = session_.per_pid_links({dev, m.inode, false}) >= shared_threshold_
                  ? attach_shared(m, elf, kRoleSyscalls, std::move(reports), specs, std::move(ranges))
                  : attach_fixed(m, elf, kRoleSyscalls, std::move(reports), specs, std::move(ranges));
  if (!st) {
    set_syscall_state(SyscallTracing::kTracepoints, st.error().message);
    return;
  }
  // After attaching: a brk call from now on is seen by the probe, which
  // then sets brk_last itself (seed_brk leaves it alone). A call between
  // this read and the probe's first hit is the one case that can record a
  // wrong delta; one call, once per image.
  if (seed_curbrk) seed_brk_from(m, elf, *seed_curbrk);
  set_syscall_state(SyscallTracing::kWrappers, "");
}

Status ProcessAttacher::attach_shared(const MapEntry& m, const ElfFile& elf, const std::string& role,
                                      std::vector<ProbeReport> reports,
                                      const std::vector<UprobeSpec>& specs,
                                      std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  AttachedObject obj = new_object(m, elf);
  const BpfSession::SharedKey key{obj.dev, obj.inode, role == kRoleLoader};
  if (session_.shared_users(key) == 0) {
    Result<int> fd_or = open_mapped_file(pid_, m);
    if (!fd_or) return fd_or.error();
    Fd fd(*fd_or);
    const uint64_t link_start = monotonic_ns();
    if (Status st = session_.acquire_shared_uprobes(key, "/proc/self/fd/" + std::to_string(fd.get()), specs);
        !st)
      return Error{st.error().code, m.path + ": " + st.error().message};
    LW_LOG_DEBUG("attach stages pid %d: shared %s link on %s: %.3f ms", pid_, role.c_str(), m.path.c_str(),
                 (monotonic_ns() - link_start) / 1e6);
  } else if (Status st = session_.acquire_shared_uprobes(key, "", specs); !st) {
    return st;
  }
  obj.role = role;
  obj.shared = true;
  obj.probes = std::move(reports);
  for (ProbeReport& r : obj.probes) r.attached = true;
  obj.function_ranges = std::move(ranges);
  objects_.push_back(std::move(obj));
  return ok_status();
}

void ProcessAttacher::seed_brk_from(const MapEntry& m, const ElfFile& elf, uint64_t curbrk_vaddr) {
  // The load bias, from the PT_LOAD segment the mapping shows.
  std::optional<uint64_t> bias;
  for (const ElfSegment& seg : elf.segments())
    if (m.offset >= (seg.offset & ~0xfffull) && m.offset < seg.offset + std::max(seg.filesz, uint64_t{1}))
      bias = m.start - m.offset - (seg.vaddr - seg.offset);
  uint64_t value = 0;
  if (bias) {
    ProcessMemory mem(pid_);
    if (!mem.read(curbrk_vaddr + *bias, &value, sizeof(value))) value = 0;
  }
  // Unseeded, the first brk call is not recorded and counted (brk_unknown).
  if (value) session_.seed_brk(pid_, value);
}

Status ProcessAttacher::attach_fixed(const MapEntry& m, const ElfFile& elf, const std::string& role,
                                     std::vector<ProbeReport> reports,
                                     const std::vector<UprobeSpec>& specs,
                                     std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  Result<int> fd_or = open_mapped_file(pid_, m);
  if (!fd_or) return fd_or.error();
  Fd fd(*fd_or);
  AttachedObject obj = new_object(m, elf);
  obj.role = role;
  obj.probes = std::move(reports);
  obj.function_ranges = std::move(ranges);
  const uint64_t link_start = monotonic_ns();
  Result<std::vector<Link>> links =
      session_.attach_uprobes(pid_, "/proc/self/fd/" + std::to_string(fd.get()), specs, false);
  LW_LOG_DEBUG("attach stages pid %d: %s link on %s: %.3f ms", pid_, role.c_str(), m.path.c_str(),
               (monotonic_ns() - link_start) / 1e6);
  // Not kept on failure: the next rescan tries again, and the caller
  // records why (AllocatorInfo::mmap_tracing_reason).
  if (!links) return Error{links.error().code, m.path + ": " + links.error().message};
  for (ProbeReport& r : obj.probes) r.attached = true;
  obj.links = std::move(*links);
  if (role == kRoleSyscalls || role == kRoleLoader)
    ++session_.per_pid_links({obj.dev, obj.inode, role == kRoleLoader});
  objects_.push_back(std::move(obj));
  return ok_status();
}

Status ProcessAttacher::attach_object(const MapEntry& m, const ElfFile& elf,
                                      const std::vector<const PlannedProbe*>& probes,
                                      bool keep_on_failure) {
  Result<int> fd_or = open_mapped_file(pid_, m);
  if (!fd_or) return fd_or.error();
  Fd fd(*fd_or);

  AttachedObject obj = new_object(m, elf);
  const std::string fd_path = "/proc/self/fd/" + std::to_string(fd.get());

  ObjectSpecs specs;
  bool required_failed = false;
  std::string required_error;
  for (const PlannedProbe* planned : probes) {
    const ProbeSpec& spec = planned->spec;
    if (obj.role.find(planned->role) == std::string::npos)
      obj.role += (obj.role.empty() ? "" : ",") + planned->role;
    if (spec.hint_only && !hint_probes_) {
      // Not probed, but its frames are still the allocator's, not the site.
      if (std::optional<uint64_t> start = elf.vaddr_to_offset(planned->symbol.vaddr))
        obj.function_ranges.emplace_back(*start, *start + std::max<uint64_t>(planned->symbol.size, 1));
      continue;
    }
    ProbeReport report;
    report.symbols = spec.symbol;
    for (const std::string& alias : planned->aliases) report.symbols += "," + alias;
    report.retprobe = spec.needs_return;
    uint64_t probe_vaddr = planned->symbol.vaddr;
    if (spec.needs_return) {
      // Both probes move together: the return probe hijacks [sp] where it hits.
      ProbePlacement pl = place_return_probe(elf, planned->symbol);
      probe_vaddr = pl.vaddr;
      report.placement = pl.reason;
    } else if (!spec.movable) {
      report.placement = "entry (reads the return address)";
    } else {
      // free's program reads only the pointer (lw_entry, LW_FUNC_FREE).
      ProbePlacement pl = place_entry_only_probe(elf, planned->symbol, spec.func == LW_FUNC_FREE ? 1 : 3);
      probe_vaddr = pl.vaddr;
      report.placement = pl.reason;
    }
    if (std::optional<uint64_t> start = elf.vaddr_to_offset(planned->symbol.vaddr))
      obj.function_ranges.emplace_back(*start, *start + std::max<uint64_t>(planned->symbol.size, 1));
    std::optional<uint64_t> off = elf.vaddr_to_offset(probe_vaddr);
    if (!off) {
      report.error = "address not in a loadable segment";
      if (spec.required) {
        required_failed = true;
        required_error = spec.symbol + ": " + report.error;
      }
    } else {
      report.file_offset = *off;
      if (spec.needs_return && session_.uprobe_session() && is_tensor_role(planned->role)) {
        // Entry and return in one session: the return only where the call
        // has something to record (decision tensor-tier, "Uprobe sessions").
        specs.sessions.push_back({*off, spec.func});
        report.placement += report.placement.empty() ? "uprobe session" : "; uprobe session";
      } else {
        specs.entries.push_back({*off, spec.func});
        if (spec.needs_return) specs.returns.push_back({*off, spec.func});
      }
    }
    obj.probes.push_back(std::move(report));
  }
  if (required_failed) return Error{EINVAL, m.path + ": " + required_error};
  const bool allocator = is_heap_role(obj.role);
  if (allocator) {
    split_alloc_side(specs, obj);
    obj.map = m;
  }
  Result<std::vector<Link>> links = attach_links(fd_path, specs, is_tensor_role(obj.role));
  if (links && allocator && !alloc_parked_) {
    if (Status st = attach_alloc_links(fd_path, obj); !st) {
      destroy_links(std::move(*links));
      links = st.error();
    }
  } else if (links && allocator) {
    // Mapped while the allocating side is parked: attached at the next burst.
    mark_parked(obj, obj.alloc_entries, true);
  }
  if (!links) {
    const Error& e = links.error();
    if (keep_on_failure) {
      // Optional probes: keep the object, its probes marked not attached
      // and why (the probe_attached metric and the API show it).
      for (ProbeReport& r : obj.probes)
        if (r.error.empty()) r.error = e.message;
      objects_.push_back(std::move(obj));
    }
    return Error{e.code, m.path + ": " + e.message};
  }
  for (ProbeReport& r : obj.probes) r.attached = r.error.empty();
  obj.links = std::move(*links);
  objects_.push_back(std::move(obj));
  return ok_status();
}

// All entries in one attach, all returns in another and the tensor sessions
// in a third (one link each with uprobe_multi). Either all attach or none is
// kept: no object is left half probed (say, entries without their returns).
Result<std::vector<Link>> ProcessAttacher::attach_links(const std::string& fd_path,
                                                        const ObjectSpecs& specs, bool tensor) {
  Result<std::vector<Link>> entries = session_.attach_uprobes(pid_, fd_path, specs.entries, false);
  if (!entries) return entries.error();
  Result<std::vector<Link>> returns = session_.attach_uprobes(pid_, fd_path, specs.returns, true, tensor);
  if (!returns) return returns.error();
  Result<std::vector<Link>> sessions = session_.attach_tensor_sessions(pid_, fd_path, specs.sessions);
  if (!sessions) return sessions.error();
  std::vector<Link> all = std::move(*entries);
  for (Link& l : *returns) all.push_back(std::move(l));
  for (Link& l : *sessions) all.push_back(std::move(l));
  return all;
}

bool ProcessAttacher::in_probed_function(uint32_t dev, uint64_t inode, uint64_t offset) const {
  for (const AttachedObject& o : objects_) {
    if (o.inode != inode || kernel_dev(major(o.dev), minor(o.dev)) != dev) continue;
    for (const auto& [start, end] : o.function_ranges)
      if (offset >= start && offset < end) return true;
  }
  return false;
}

}  // namespace lw
