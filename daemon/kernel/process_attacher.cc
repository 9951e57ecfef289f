#include "daemon/kernel/process_attacher.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "daemon/core/capabilities.h"
#include "daemon/core/elf_file.h"
#include "daemon/core/fd.h"
#include "daemon/core/probe_placement.h"
#include "daemon/kernel/cuda_probes.h"

namespace lw {

namespace {

struct ProbeSpec {
  const char* symbol;
  uint32_t func;      // enum lw_func: the entry program's cookie
  bool needs_return;  // a uretprobe too, at the entry
  bool required;      // the process cannot be traced without it
  bool movable;       // entry-only and may move past a NULL check
};

// libc. operator delete is not probed: every libstdc++ delete variant is a
// tail call to free (checked on this libstdc++: `endbr64; jmp free@plt` or
// `jmp _ZdlPv@plt`), so the free probe sees each delete once; probing both
// would trap twice per delete for no extra information.
constexpr ProbeSpec kLibcProbes[] = {
    {"malloc", LW_FUNC_MALLOC, true, true, false},
    {"free", LW_FUNC_FREE, false, true, true},
    {"calloc", LW_FUNC_CALLOC, true, false, false},
    {"realloc", LW_FUNC_REALLOC, true, false, false},
    {"reallocarray", LW_FUNC_REALLOCARRAY, true, false, false},
    {"posix_memalign", LW_FUNC_POSIX_MEMALIGN, true, false, false},
    {"aligned_alloc", LW_FUNC_ALIGNED, true, false, false},
    {"memalign", LW_FUNC_ALIGNED, true, false, false},
    {"valloc", LW_FUNC_MALLOC, true, false, false},
    {"pvalloc", LW_FUNC_MALLOC, true, false, false},  // the requested size
    // sbrk outside malloc is kind mmap; glibc's sbrk has no frame pointer,
    // so only its return probe sees the caller.
    {"sbrk", LW_FUNC_SBRK, true, false, false},
};

// Every operator new variant takes the size first. Entry probes only, kept
// at the entry (they read the return address at sp): a return probe on new
// would break C++ exceptions thrown through it (see lw_new_enter), so the
// block is accounted at the malloc-family call inside new.
constexpr ProbeSpec kLibstdcxxProbes[] = {
    {"_Znwm", LW_FUNC_NEW, false, false, false},
    {"_Znam", LW_FUNC_NEW, false, false, false},
    {"_ZnwmRKSt9nothrow_t", LW_FUNC_NEW, false, false, false},
    {"_ZnamRKSt9nothrow_t", LW_FUNC_NEW, false, false, false},
    {"_ZnwmSt11align_val_t", LW_FUNC_NEW, false, false, false},
    {"_ZnamSt11align_val_t", LW_FUNC_NEW, false, false, false},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t", LW_FUNC_NEW, false, false, false},
    {"_ZnamSt11align_val_tRKSt9nothrow_t", LW_FUNC_NEW, false, false, false},
};

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Opens the mapped file as the target sees it. /proc/PID/map_files/ names
// the exact mapping (it works for deleted or replaced files and for other
// mount namespaces); /proc/PID/root/PATH is the fallback where map_files is
// not readable. The inode is checked, so a file swapped under the same path
// is never probed by mistake.
Result<int> open_mapped_file(pid_t pid, const MapEntry& m) {
  char buf[128];
  snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m.start, m.end);
  const std::string candidates[] = {buf, "/proc/" + std::to_string(pid) + "/root" + m.path};
  int errors[2] = {0, 0};
  Error last{ENOENT, "no path"};
  for (int i = 0; i < 2; ++i) {
    const std::string& p = candidates[i];
    // Regular files only, never blocking on a FIFO; the /proc/PID/root
    // fallback resolves every link inside the target's root (fd.h).
    Result<int> opened = open_untrusted_file(p);
    if (!opened) {
      errors[i] = opened.error().code;
      last = Error{opened.error().code, p + ": " + opened.error().message};
      continue;
    }
    int fd = *opened;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_ino == m.inode && S_ISREG(st.st_mode)) return fd;
    close(fd);
    errors[i] = ESTALE;
    last = Error{ESTALE, p + ": file changed since it was mapped"};
  }
  // Name the capability that would have opened it (README, "Capabilities").
  // map_files needs CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN); without it
  // only the path is left, which fails for a deleted or replaced file.
  if (errors[0] == EPERM && !has_capability(CAP_CHECKPOINT_RESTORE) && !has_capability(CAP_SYS_ADMIN) &&
      (errors[1] == ENOENT || errors[1] == ESTALE))
    return Error{EPERM, "permission denied opening " + candidates[0] +
                            ": missing CAP_CHECKPOINT_RESTORE (needed to open " + m.path +
                            " through /proc/PID/map_files: it was deleted or replaced on disk since pid " +
                            std::to_string(pid) + " mapped it)"};
  if (errors[1] == EACCES || errors[1] == EPERM) {
    if (std::string missing = missing_capabilities({CAP_SYS_PTRACE}); !missing.empty())
      return Error{EPERM, "permission denied opening " + candidates[1] + ": missing " + missing +
                              " (needed to read another user's /proc/PID/root)"};
    if (std::string missing = missing_capabilities({CAP_DAC_READ_SEARCH}); !missing.empty())
      return Error{EPERM, "permission denied opening " + candidates[1] + ": missing " + missing +
                              " (the file or a directory above it is not readable by leakwatch's user)"};
  }
  return last;
}


}  // namespace

std::vector<Link> ProcessAttacher::take_links() {
  std::vector<Link> links;
  for (AttachedObject& o : objects_)
    for (Link& l : o.links) links.push_back(std::move(l));
  objects_.clear();
  return links;
}

void ProcessAttacher::detach_all() { destroy_links(take_links()); }

std::string allocator_role(const std::string& path) {
  std::string base = basename_of(path);
  if (base.rfind("libc.so", 0) == 0 || (base.rfind("libc-", 0) == 0 && base.find(".so") != std::string::npos))
    return "libc";
  if (base.rfind("libstdc++.so", 0) == 0) return "libstdc++";
  return "";
}

Status ProcessAttacher::attach_new_objects() {
  Result<ParsedMaps> maps = read_proc_maps(pid_);
  if (!maps) return maps.error();
  bool first = objects_.empty();
  // CUDA (optional): the runtime and driver libraries, and an executable
  // that may have the runtime linked in (checked by symbol, once).
  char exe_buf[4096];
  ssize_t exe_len = readlink(("/proc/" + std::to_string(pid_) + "/exe").c_str(), exe_buf,
                             sizeof(exe_buf) - 1);
  const std::string exe = exe_len > 0 ? std::string(exe_buf, static_cast<size_t>(exe_len)) : "";
  for (const MapEntry& m : maps->entries) {
    if (!m.is_file()) continue;
    std::string role = allocators_ ? allocator_role(m.path) : "";
    if (role.empty() && cuda_) role = cuda_library_role(m.path);
    if (role.empty() && cuda_ && !exe.empty() && m.path == exe) role = kRoleCudaStatic;
    if (role.empty()) continue;
    uint64_t dev = makedev(m.dev_major, m.dev_minor);
    bool known = std::any_of(objects_.begin(), objects_.end(), [&](const AttachedObject& o) {
      return o.inode == m.inode && o.dev == dev;
    });
    if (known) continue;
    Status st = attach_object(m, role);
    if (!st && role == "libc") return st;
  }
  if (first && allocators_ && std::none_of(objects_.begin(), objects_.end(),
                            [](const AttachedObject& o) { return o.role == "libc"; })) {
    // Caught right after exec, the dynamic loader has not mapped libc yet:
    // the mapping will be reported (LW_EV_MAP_EXEC) and attached then.
    bool loader_running = std::any_of(maps->entries.begin(), maps->entries.end(),
                                      [](const MapEntry& m) {
                                        return basename_of(m.path).rfind("ld-linux", 0) == 0;
                                      });
    if (!loader_running)
      return Error{ENOENT, "process " + std::to_string(pid_) +
                               " maps no shared libc (statically linked or another allocator); "
                               "nothing to probe"};
  }
  return ok_status();
}

Status ProcessAttacher::attach_object(const MapEntry& m, const std::string& role) {
  Result<int> fd_or = open_mapped_file(pid_, m);
  if (!fd_or) return fd_or.error();
  Fd fd(*fd_or);
  auto elf = ElfFile::open_fd(fd.get(), m.path);
  if (!elf) return Error{elf.error().code, m.path + ": " + elf.error().message};

  AttachedObject obj;
  obj.path = m.path;
  obj.dev = makedev(m.dev_major, m.dev_minor);
  obj.inode = m.inode;
  obj.build_id = (*elf)->build_id();
  obj.role = role;
  const std::string fd_path = "/proc/self/fd/" + std::to_string(fd.get());

  const ProbeSpec* specs = role == "libc" ? kLibcProbes : kLibstdcxxProbes;
  size_t nspecs = role == "libc" ? std::size(kLibcProbes) : std::size(kLibstdcxxProbes);
  std::vector<ProbeSpec> cuda_specs;  // optional, entry probes at the entry
  if (is_cuda_role(role)) {
    // An executable without the runtime linked in is remembered with no
    // probes, so it is not opened again at every rescan.
    if (role == kRoleCudaStatic && !(*elf)->find_function(kCudaStaticMarker)) {
      objects_.push_back(std::move(obj));
      return ok_status();
    }
    for (const CudaProbeSpec& c : cuda_probe_specs(role))
      cuda_specs.push_back({c.symbol, c.func, c.needs_return, false, false});
    specs = cuda_specs.data();
    nspecs = cuda_specs.size();
  }
  std::vector<uint64_t> probed_vaddrs;
  std::vector<UprobeSpec> entries, returns;
  bool required_failed = false;
  std::string required_error;
  for (size_t i = 0; i < nspecs; ++i) {
    const ProbeSpec& spec = specs[i];
    std::optional<ElfSymbol> sym = (*elf)->find_function(spec.symbol);
    if (!sym) {
      if (spec.required) {
        required_failed = true;
        required_error = std::string(spec.symbol) + " not found in " + m.path;
      }
      continue;
    }
    // aligned_alloc and memalign are one function in glibc: probe it once.
    auto dup = std::find(probed_vaddrs.begin(), probed_vaddrs.end(), sym->vaddr);
    if (dup != probed_vaddrs.end()) {
      obj.probes[static_cast<size_t>(dup - probed_vaddrs.begin())].symbols +=
          std::string(",") + spec.symbol;
      continue;
    }
    ProbeReport report;
    report.symbols = spec.symbol;
    report.retprobe = spec.needs_return;
    uint64_t probe_vaddr = sym->vaddr;
    if (spec.needs_return) {
      report.placement = "entry (return probe needs the entry)";
    } else if (!spec.movable) {
      report.placement = "entry (reads the return address)";
    } else {
      ProbePlacement pl = place_entry_only_probe(**elf, *sym);
      probe_vaddr = pl.vaddr;
      report.placement = pl.reason;
    }
    std::optional<uint64_t> off = (*elf)->vaddr_to_offset(probe_vaddr);
    std::optional<uint64_t> entry_off = (*elf)->vaddr_to_offset(sym->vaddr);
    if (!off || !entry_off) {
      report.error = "address not in a loadable segment";
      if (spec.required) {
        required_failed = true;
        required_error = std::string(spec.symbol) + ": " + report.error;
      }
    } else {
      report.file_offset = *off;
      entries.push_back({*off, spec.func});
      if (spec.needs_return) returns.push_back({*entry_off, spec.func});
    }
    probed_vaddrs.push_back(sym->vaddr);
    obj.probes.push_back(std::move(report));
  }
  if (required_failed) return Error{EINVAL, required_error};
  // All entries in one attach and all returns in another (one link each
  // with uprobe_multi). Either attaches whole or not at all: no object is
  // left half probed (say, entries without their returns).
  Result<std::vector<Link>> entry_links = session_.attach_uprobes(pid_, fd_path, entries, false);
  Result<std::vector<Link>> return_links =
      entry_links ? session_.attach_uprobes(pid_, fd_path, returns, true) : entry_links.error();
  if (!entry_links || !return_links) {
    const Error& e = entry_links ? return_links.error() : entry_links.error();
    if (is_cuda_role(role)) {
      // Optional: keep the object, its probes marked not attached and why
      // (the probe_attached metric and the API show it).
      for (ProbeReport& r : obj.probes)
        if (r.error.empty()) r.error = e.message;
      objects_.push_back(std::move(obj));
    }
    return Error{e.code, m.path + ": " + e.message};
  }
  for (ProbeReport& r : obj.probes) r.attached = r.error.empty();
  for (Link& l : *entry_links) obj.links.push_back(std::move(l));
  for (Link& l : *return_links) obj.links.push_back(std::move(l));
  if (required_failed) return Error{EINVAL, required_error};
  objects_.push_back(std::move(obj));
  return ok_status();
}

}  // namespace lw
