// SPDX-License-Identifier: Apache-2.0
// lw_bench_noop: attaches no-op uprobes to one process at the addresses
// leakwatch uses, to measure the floor cost of leakwatch's probe layout.
//
//   lw_bench_noop -p PID [--free-at-entry]
//   lw_bench_noop -p PID --memalign entry|moved|retsites [--ret-offsets OFF,...]
//   lw_bench_noop -p PID --syscall-tp
//   lw_bench_noop -p PID --tensor [--no-session]
//   lw_bench_noop -p PID --layout FILE
//
// Probes, all on the libc that PID maps:
//   - malloc entry (uprobe) and malloc return (uretprobe): leakwatch needs
//     both, the size at entry and the pointer at return;
//   - free: where lw::place_entry_only_probe() puts it (past the NULL check,
//     at an instruction the kernel emulates), or with --free-at-entry at the
//     symbol itself, which shows what a single-stepped probe costs.
// Prints `attached` on stdout once all three are in place, then waits for
// SIGINT/SIGTERM (or for the target to exit) and detaches.
//
// With --memalign, only posix_memalign is probed (bench/memalign_run.sh), in
// one of three layouts:
//   entry:    uprobe + uretprobe at the symbol (leakwatch today, decision return-probe-placement:
//             the first instruction, `cmpb $0,...(%rip)`, is single-stepped);
//   moved:    uprobe + uretprobe past that `cmpb`, on the `push` that
//             follows (emulated). The stack pointer has not moved there, so
//             the return address the uretprobe hijacks is still at [sp];
//   retsites: an entry uprobe on that `push` and a plain uprobe on every
//             `ret` of the function (--ret-offsets, from the symbol, found
//             by the driver with objdump), reading the caller at [sp].
// On stop it prints the hit counts and the last caller address seen, so the
// driver can check that every layout read what a tracer needs.
//
// With --syscall-tp it attaches no uprobe, only no-op programs on the
// raw_syscalls sys_enter/sys_exit tracepoints (host-wide, as leakwatch's
// light mode does), and stays until the target PID exits or a signal.
//
// With --tensor, the tensor tier's layout on the libc10.so PID maps
// (bench/tensor_tier_cost.py, config noop-tensors): c10::alloc_cpu as one
// uprobe session whose entry skips the return for 0 bytes, placed where
// leakwatch places it, and c10::free_cpu at its entry; with --no-session
// (or where the kernel lacks sessions) alloc_cpu gets entry + uretprobe.
// On stop it prints the hit counts.
//
// With --layout FILE, the probes are wherever FILE says, one per line:
// `PATH FILE_OFFSET KIND`, anything after a `#` a comment. KIND is
// `entry`, `entry+return` or `session` (an entry whose non-zero return
// skips the return probe; it skips it for a zero first argument, as
// leakwatch's alloc_cpu session does). PATH is the
// object as the target maps it. bench/lib/probe_layout.py writes such a
// file from a running leakwatch's /api/v1/status, so the no-op programs sit
// at every place leakwatch attached (bench/torch_run.sh, row noop-full).
// The links are uprobe_multi links, one per object and kind, as
// leakwatch's own, where the kernel has them. On stop it prints the hits.
#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/probes/probe_placement.h"
#include "engine/uprobe_links.h"
#include "noop_probes.skel.h"

namespace {

struct Options {
  pid_t pid = 0;
  bool free_at_entry = false;
  std::string memalign;              // "", "entry", "moved", "retsites"
  std::vector<uint64_t> ret_offsets;  // for "retsites"
  bool syscall_tp = false;
  bool tensor = false;
  bool no_session = false;
  std::string layout;  // --layout FILE
};

bool parse_offsets(const char* s, std::vector<uint64_t>* out) {
  std::string_view rest = s;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(item.c_str(), &end, 0);
    if (errno != 0 || item.empty() || *end != '\0') return false;
    out->push_back(v);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return !out->empty();
}

std::optional<Options> parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-p" && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v <= 0) return std::nullopt;
      o.pid = static_cast<pid_t>(v);
    } else if (a == "--free-at-entry") {
      o.free_at_entry = true;
    } else if (a == "--memalign" && i + 1 < argc) {
      o.memalign = argv[++i];
      if (o.memalign != "entry" && o.memalign != "moved" && o.memalign != "retsites") {
        return std::nullopt;
      }
    } else if (a == "--syscall-tp") {
      o.syscall_tp = true;
    } else if (a == "--tensor") {
      o.tensor = true;
    } else if (a == "--no-session") {
      o.no_session = true;
    } else if (a == "--layout" && i + 1 < argc) {
      o.layout = argv[++i];
    } else if (a == "--ret-offsets" && i + 1 < argc) {
      if (!parse_offsets(argv[++i], &o.ret_offsets)) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (o.pid == 0) return std::nullopt;
  if (o.memalign == "retsites" && o.ret_offsets.empty()) return std::nullopt;
  return o;
}

bool is_libc_name(std::string_view path) {
  std::string_view base = path.substr(path.rfind('/') + 1);
  // "libc.so.6" today; "libc-2.31.so" on older glibc. Not "libcrypt.so".
  return base.starts_with("libc.so") || (base.starts_with("libc-") && base.ends_with(".so"));
}

// The path of the libc that `pid` has mapped executable, as seen from inside
// the process (/proc/PID/root/...), so a target in another mount namespace
// resolves to its own file. A minimal parse: this tool needs one field of
// one line, not a general maps reader.
bool is_libc10_name(std::string_view path) {
  return path.substr(path.rfind('/') + 1).starts_with("libc10.so");
}

lw::Result<std::string> find_mapped(pid_t pid, bool (*wanted)(std::string_view)) {
  std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
  std::ifstream in(maps_path);
  if (!in) return lw::errno_error("open " + maps_path);
  std::string line;
  while (std::getline(in, line)) {
    // address perms offset dev inode path
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    if (perms.size() == 4 && perms[2] == 'x' && !path.empty() && path[0] == '/' &&
        wanted(path)) {
      return "/proc/" + std::to_string(pid) + "/root" + path;
    }
  }
  return lw::Error{ENOENT, "no executable mapping of the library in " + maps_path};
}

struct ResolvedProbe {
  uint64_t file_offset = 0;
  std::string where;  // for the operator: "free+9 (after NULL check)"
};

lw::Result<ResolvedProbe> resolve(const lw::ElfFile& elf, std::string_view func,
                                  bool entry_only_placement) {
  auto sym = elf.find_function(func);
  if (!sym) return lw::Error{ENOENT, std::string(func) + ": no such function in " + elf.path()};
  uint64_t vaddr = sym->vaddr;
  std::string where = std::string(func);
  if (entry_only_placement) {
    lw::ProbePlacement p = lw::place_entry_only_probe(elf, *sym);
    vaddr = p.vaddr;
    if (p.skipped != 0) where += "+" + std::to_string(p.skipped);
    where += " (" + p.reason + ")";
  }
  auto off = elf.vaddr_to_offset(vaddr);
  if (!off) return lw::Error{EINVAL, where + ": address not in a PT_LOAD segment"};
  return ResolvedProbe{*off, where};
}

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

struct SkelDeleter {
  void operator()(noop_probes* s) const { noop_probes__destroy(s); }
};

// Opens and loads the programs. noop_tensor_session calls a kfunc only
// session programs may call (kernel 6.18 refuses it in a plain uprobe
// program): loaded as a session program where `session`, left out
// otherwise. `multi`: the layout's programs are loaded for uprobe_multi
// links. nullptr, said on stderr, when the kernel refuses them.
std::unique_ptr<noop_probes, SkelDeleter> load_skel(bool session, bool multi) {
  std::unique_ptr<noop_probes, SkelDeleter> skel(noop_probes__open());
  if (skel && multi) {
    for (bpf_program* p : {skel->progs.noop_layout_entry, skel->progs.noop_layout_return})
      bpf_program__set_expected_attach_type(p, static_cast<bpf_attach_type>(lw::kAttachUprobeMulti));
  }
  if (skel && session)
    bpf_program__set_expected_attach_type(skel->progs.noop_tensor_session,
                                          static_cast<bpf_attach_type>(lw::kAttachUprobeSession));
  else if (skel)
    bpf_program__set_autoload(skel->progs.noop_tensor_session, false);
  if (!skel || noop_probes__load(skel.get()) != 0) {
    std::fprintf(stderr, "lw_bench_noop: load BPF programs: %s\n", std::strerror(errno));
    return nullptr;
  }
  return skel;
}

lw::Result<Link> attach(bpf_program* prog, pid_t pid, const std::string& path,
                        const ResolvedProbe& probe, bool retprobe) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe);
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(),
                                                   probe.file_offset, &opts);
  if (link == nullptr) {
    return lw::errno_error(std::string("attach ") + (retprobe ? "uretprobe " : "uprobe ") +
                           probe.where + " in " + path);
  }
  return Link(link);
}

// Blocks until SIGINT/SIGTERM, or until `pid` is gone (so a driver that dies
// without stopping us does not leave probes behind). The signals must
// already be blocked.
void wait_for_stop(pid_t pid, const sigset_t& stop_signals) {
  const timespec poll_interval{1, 0};
  for (;;) {
    if (sigtimedwait(&stop_signals, nullptr, &poll_interval) >= 0) return;
    if (errno == EAGAIN && kill(pid, 0) != 0 && errno == ESRCH) {
      std::fprintf(stderr, "lw_bench_noop: target %d exited\n", static_cast<int>(pid));
      return;
    }
  }
}

// `cmpb $imm8, disp32(%rip)`: 80 3d <disp32> <imm8>. It reads memory and
// sets flags only: no register, no stack pointer, no branch.
constexpr size_t kCmpbRipLen = 7;
bool is_cmpb_rip_imm8(const std::vector<uint8_t>& c) {
  return c.size() >= kCmpbRipLen && c[0] == 0x80 && c[1] == 0x3d;
}

int run_memalign(const Options& opt, const std::string& libc, const lw::ElfFile& elf,
                 const sigset_t& stop_signals) {
  auto sym = elf.find_function("posix_memalign");
  if (!sym) {
    std::fprintf(stderr, "lw_bench_noop: posix_memalign not in %s\n", libc.c_str());
    return 1;
  }
  auto sym_off = elf.vaddr_to_offset(sym->vaddr);
  std::vector<uint8_t> code = elf.read_at_vaddr(sym->vaddr, 16);
  if (!sym_off || code.size() < kCmpbRipLen + 2) {
    std::fprintf(stderr, "lw_bench_noop: cannot read posix_memalign's code\n");
    return 1;
  }
  // Moving past the first instruction needs it to be the cmpb above and the
  // next one to be emulated; otherwise this layout is not available here.
  uint64_t moved = 0;
  if (opt.memalign != "entry") {
    if (!is_cmpb_rip_imm8(code) ||
        !lw::kernel_emulates(code.data() + kCmpbRipLen, code.size() - kCmpbRipLen)) {
      std::fprintf(stderr,
                   "lw_bench_noop: posix_memalign does not begin with cmpb $imm8,(%%rip) "
                   "followed by an emulated instruction; layout '%s' not available\n",
                   opt.memalign.c_str());
      return 1;
    }
    moved = kCmpbRipLen;
  }
  std::unique_ptr<noop_probes, SkelDeleter> skel = load_skel(false, false);
  if (!skel) return 1;
  std::vector<lw::Result<Link>> links;
  std::string where;
  ResolvedProbe entry{*sym_off + moved, "posix_memalign+" + std::to_string(moved)};
  links.push_back(attach(skel->progs.memalign_entry, opt.pid, libc, entry, false));
  if (opt.memalign == "retsites") {
    where = entry.where + " entry";
    for (uint64_t off : opt.ret_offsets) {
      ResolvedProbe r{*sym_off + off, "posix_memalign+" + std::to_string(off)};
      links.push_back(attach(skel->progs.memalign_ret_site, opt.pid, libc, r, false));
      where += ", " + r.where + " (ret)";
    }
  } else {
    links.push_back(attach(skel->progs.memalign_return, opt.pid, libc, entry, true));
    where = entry.where + " entry + uretprobe";
  }
  for (const auto& l : links) {
    if (!l) {
      std::fprintf(stderr, "lw_bench_noop: %s\n", l.error().message.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "lw_bench_noop: pid %d, %s: %s\n", static_cast<int>(opt.pid),
               libc.c_str(), where.c_str());
  std::printf("attached\n");
  std::fflush(stdout);
  wait_for_stop(opt.pid, stop_signals);
  const auto* bss = skel->bss;
  std::printf("memalign_hits entry %llu return %llu return_nonzero %llu last_caller 0x%llx\n",
              static_cast<unsigned long long>(bss->memalign_entry_hits),
              static_cast<unsigned long long>(bss->memalign_return_hits),
              static_cast<unsigned long long>(bss->memalign_return_nonzero),
              static_cast<unsigned long long>(bss->memalign_last_caller));
  std::fflush(stdout);
  return 0;
}

int run_syscall_tp(const Options& opt, const sigset_t& stop_signals) {
  std::unique_ptr<noop_probes, SkelDeleter> skel = load_skel(false, false);
  if (!skel) return 1;
  Link enter(bpf_program__attach_raw_tracepoint(skel->progs.noop_sys_enter, "sys_enter"));
  Link exit_link(bpf_program__attach_raw_tracepoint(skel->progs.noop_sys_exit, "sys_exit"));
  if (!enter || !exit_link) {
    std::fprintf(stderr, "lw_bench_noop: attach raw_tp sys_enter/sys_exit: %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::fprintf(stderr, "lw_bench_noop: no-op raw_tp sys_enter + sys_exit (host-wide)\n");
  std::printf("attached\n");
  std::fflush(stdout);
  wait_for_stop(opt.pid, stop_signals);
  return 0;
}

// The file offset leakwatch probes `func` at: where place_return_probe()
// puts an allocating call's entry and return, or the symbol itself.
lw::Result<ResolvedProbe> resolve_tensor(const lw::ElfFile& elf, std::string_view func, bool with_return) {
  auto sym = elf.find_function(func);
  if (!sym) return lw::Error{ENOENT, std::string(func) + ": no such function in " + elf.path()};
  uint64_t vaddr = sym->vaddr;
  std::string where(func);
  if (with_return) {
    lw::ProbePlacement p = lw::place_return_probe(elf, *sym);
    vaddr = p.vaddr;
    where += " (" + p.reason + ")";
  }
  auto off = elf.vaddr_to_offset(vaddr);
  if (!off) return lw::Error{EINVAL, where + ": address not in a PT_LOAD segment"};
  return ResolvedProbe{*off, where};
}

// alloc_cpu's links: one session, or entry + uretprobe.
lw::Result<std::vector<Link>> attach_tensor_alloc(noop_probes* skel, pid_t pid, const std::string& path,
                                                  const ResolvedProbe& alloc, bool session) {
  std::vector<Link> links;
  if (session) {
    lw::Result<int> fd = lw::create_uprobe_link(bpf_program__fd(skel->progs.noop_tensor_session),
                                                lw::kAttachUprobeSession, pid, path, {alloc.file_offset},
                                                {0}, false);
    if (!fd) return fd.error();
    // Not a libbpf link: held by its fd, closed on exit like the others.
    std::fprintf(stderr, "lw_bench_noop: session link fd %d\n", *fd);
    return links;
  }
  for (bool ret : {false, true}) {
    auto l = attach(ret ? skel->progs.noop_malloc_return : skel->progs.noop_malloc_entry, pid, path, alloc, ret);
    if (!l) return l.error();
    links.push_back(std::move(*l));
  }
  return links;
}

int run_tensor(const Options& opt, const sigset_t& stop_signals) {
  auto lib = find_mapped(opt.pid, is_libc10_name);
  if (!lib) {
    std::fprintf(stderr, "lw_bench_noop: libc10: %s\n", lib.error().message.c_str());
    return 1;
  }
  auto elf = lw::ElfFile::open_path(*lib);
  if (!elf) {
    std::fprintf(stderr, "lw_bench_noop: libc10: %s\n", elf.error().message.c_str());
    return 1;
  }
  auto alloc = resolve_tensor(**elf, "_ZN3c109alloc_cpuEm", true);
  auto free_probe = resolve_tensor(**elf, "_ZN3c108free_cpuEPv", false);
  if (!alloc || !free_probe) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", (!alloc ? alloc : free_probe).error().message.c_str());
    return 1;
  }
  const bool session = !opt.no_session && lw::kernel_has_uprobe_session();
  std::unique_ptr<noop_probes, SkelDeleter> skel = load_skel(session, false);
  if (!skel) return 1;
  auto alloc_links = attach_tensor_alloc(skel.get(), opt.pid, *lib, *alloc, session);
  auto free_link = attach(skel->progs.noop_tensor_free, opt.pid, *lib, *free_probe, false);
  if (!alloc_links || !free_link) {
    std::fprintf(stderr, "lw_bench_noop: %s\n",
                 (!alloc_links ? alloc_links.error() : free_link.error()).message.c_str());
    return 1;
  }
  std::fprintf(stderr, "lw_bench_noop: pid %d, %s: %s%s, %s\n", static_cast<int>(opt.pid), lib->c_str(),
               alloc->where.c_str(), session ? " as a uprobe session" : " entry + uretprobe",
               free_probe->where.c_str());
  std::printf("attached\n");
  std::fflush(stdout);
  wait_for_stop(opt.pid, stop_signals);
  const auto* bss = skel->bss;
  std::printf("tensor_hits entries %llu returns %llu frees %llu\n",
              static_cast<unsigned long long>(bss->tensor_entries),
              static_cast<unsigned long long>(bss->tensor_returns),
              static_cast<unsigned long long>(bss->tensor_frees));
  std::fflush(stdout);
  return 0;
}

// --layout: one group of probes per (object, kind), in file order.
struct LayoutGroup {
  std::string path;  // as the target maps it
  std::string kind;  // entry, entry+return, session
  std::vector<uint64_t> offsets;
};

lw::Result<std::vector<LayoutGroup>> read_layout(const std::string& file) {
  std::ifstream in(file);
  if (!in) return lw::errno_error("open " + file);
  std::vector<LayoutGroup> groups;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string probe = line.substr(0, line.find('#'));  // `# ...`: a comment
    if (probe.find_first_not_of(" \t") == std::string::npos) continue;
    std::istringstream fields(probe);
    std::string path, offset, kind, extra;
    fields >> path >> offset >> kind;
    char* end = nullptr;
    errno = 0;
    const unsigned long long off = std::strtoull(offset.c_str(), &end, 0);
    if (path.empty() || path[0] != '/' || offset.empty() || errno != 0 || *end != '\0' ||
        (kind != "entry" && kind != "entry+return" && kind != "session") || (fields >> extra)) {
      return lw::Error{EINVAL, file + ":" + std::to_string(n) +
                                   ": expected `PATH FILE_OFFSET entry|entry+return|session`, got `" + line + "`"};
    }
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const LayoutGroup& x) { return x.path == path && x.kind == kind; });
    if (g == groups.end()) g = groups.insert(groups.end(), LayoutGroup{path, kind, {}});
    g->offsets.push_back(off);
  }
  if (groups.empty()) return lw::Error{EINVAL, file + ": no probes"};
  return groups;
}

// One group's links: uprobe_multi links (fds, closed on exit) where the
// kernel has them, else one libbpf link per offset.
lw::Status attach_group(noop_probes* skel, pid_t pid, const LayoutGroup& g, bool multi, bool session,
                        std::vector<Link>* links) {
  const std::string path = "/proc/" + std::to_string(pid) + "/root" + g.path;
  const std::vector<uint64_t> cookies(g.offsets.size(), 0);
  if (g.kind == "session" && session) {
    lw::Result<int> fd = lw::create_uprobe_link(bpf_program__fd(skel->progs.noop_tensor_session),
                                                lw::kAttachUprobeSession, pid, path, g.offsets, cookies,
                                                false);
    return fd ? lw::ok_status() : lw::Status(fd.error());
  }
  for (bool ret : {false, true}) {
    if (ret && g.kind == "entry") break;
    bpf_program* prog = ret ? skel->progs.noop_layout_return : skel->progs.noop_layout_entry;
    if (multi) {
      lw::Result<int> fd = lw::create_uprobe_link(bpf_program__fd(prog), lw::kAttachUprobeMulti, pid, path,
                                                  g.offsets, cookies, ret);
      if (!fd) return fd.error();
      continue;
    }
    for (uint64_t off : g.offsets) {
      auto l = attach(prog, pid, path, ResolvedProbe{off, g.path + "+" + std::to_string(off)}, ret);
      if (!l) return l.error();
      links->push_back(std::move(*l));
    }
  }
  return lw::ok_status();
}

int run_layout(const Options& opt, const sigset_t& stop_signals) {
  auto groups = read_layout(opt.layout);
  if (!groups) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", groups.error().message.c_str());
    return 1;
  }
  const bool multi = lw::kernel_has_uprobe_multi();
  const bool session = lw::kernel_has_uprobe_session();
  std::unique_ptr<noop_probes, SkelDeleter> skel = load_skel(session, multi);
  if (!skel) return 1;
  std::vector<Link> links;
  size_t probes = 0;
  for (const LayoutGroup& g : *groups) {
    if (lw::Status st = attach_group(skel.get(), opt.pid, g, multi, session, &links); !st) {
      std::fprintf(stderr, "lw_bench_noop: %s %s: %s\n", g.path.c_str(), g.kind.c_str(),
                   st.error().message.c_str());
      return 1;
    }
    probes += g.offsets.size();
    std::fprintf(stderr, "lw_bench_noop: pid %d, %s: %zu %s probe(s)%s\n", static_cast<int>(opt.pid),
                 g.path.c_str(), g.offsets.size(), g.kind.c_str(),
                 g.kind == "session" && !session ? " as entry + uretprobe (no sessions here)" : "");
  }
  std::fprintf(stderr, "lw_bench_noop: %zu probes from %s (%s links)\n", probes, opt.layout.c_str(),
               multi ? "uprobe_multi" : "per-offset");
  std::printf("attached\n");
  std::fflush(stdout);
  wait_for_stop(opt.pid, stop_signals);
  const auto* bss = skel->bss;
  std::printf("layout_hits entries %llu returns %llu session_entries %llu session_returns %llu\n",
              static_cast<unsigned long long>(bss->layout_entries),
              static_cast<unsigned long long>(bss->layout_returns),
              static_cast<unsigned long long>(bss->tensor_entries),
              static_cast<unsigned long long>(bss->tensor_returns));
  std::fflush(stdout);
  return 0;
}

int run(const Options& opt) {
  // Block the stop signals before attaching so a SIGINT that arrives while
  // attaching is not lost (it stays pending for sigtimedwait).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  if (opt.syscall_tp) return run_syscall_tp(opt, stop_signals);

  if (opt.tensor) return run_tensor(opt, stop_signals);
  if (!opt.layout.empty()) return run_layout(opt, stop_signals);
  auto libc = find_mapped(opt.pid, is_libc_name);
  if (!libc) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", libc.error().message.c_str());
    return 1;
  }
  auto elf = lw::ElfFile::open_path(*libc);
  if (!elf) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", elf.error().message.c_str());
    return 1;
  }
  if (!opt.memalign.empty()) return run_memalign(opt, *libc, **elf, stop_signals);
  auto malloc_probe = resolve(**elf, "malloc", false);
  auto free_probe = resolve(**elf, "free", !opt.free_at_entry);
  for (const auto* r : {&malloc_probe, &free_probe}) {
    if (!*r) {
      std::fprintf(stderr, "lw_bench_noop: %s\n", r->error().message.c_str());
      return 1;
    }
  }

  std::unique_ptr<noop_probes, SkelDeleter> skel = load_skel(false, false);
  if (!skel) return 1;
  auto l1 = attach(skel->progs.noop_malloc_entry, opt.pid, *libc, *malloc_probe, false);
  auto l2 = attach(skel->progs.noop_malloc_return, opt.pid, *libc, *malloc_probe, true);
  auto l3 = attach(skel->progs.noop_free_entry, opt.pid, *libc, *free_probe, false);
  for (const auto* l : {&l1, &l2, &l3}) {
    if (!*l) {
      std::fprintf(stderr, "lw_bench_noop: %s\n", l->error().message.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "lw_bench_noop: pid %d, %s: malloc entry+return, %s\n",
               static_cast<int>(opt.pid), libc->c_str(), free_probe->where.c_str());
  std::printf("attached\n");
  std::fflush(stdout);

  wait_for_stop(opt.pid, stop_signals);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto opt = parse_args(argc, argv);
  if (!opt) {
    std::fprintf(stderr,
                 "usage: %s -p PID [--free-at-entry]\n"
                 "       %s -p PID --memalign entry|moved|retsites [--ret-offsets OFF,...]\n"
                 "       %s -p PID --syscall-tp\n"
                 "       %s -p PID --tensor [--no-session]\n"
                 "       %s -p PID --layout FILE\n",
                 argv[0], argv[0], argv[0], argv[0], argv[0]);
    return 2;
  }
  return run(*opt);
}
