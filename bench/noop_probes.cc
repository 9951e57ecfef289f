// lw_bench_noop: attaches no-op uprobes to one process at the addresses
// leakwatch uses, to measure the floor cost of leakwatch's probe layout.
//
//   lw_bench_noop -p PID [--free-at-entry]
//
// Probes, all on the libc that PID maps:
//   - malloc entry (uprobe) and malloc return (uretprobe): leakwatch needs
//     both, the size at entry and the pointer at return;
//   - free: where lw::place_entry_only_probe() puts it (past the NULL check,
//     at an instruction the kernel emulates), or with --free-at-entry at the
//     symbol itself, which shows what a single-stepped probe costs.
// Prints `attached` on stdout once all three are in place, then waits for
// SIGINT/SIGTERM (or for the target to exit) and detaches.
#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

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

#include "daemon/core/elf_file.h"
#include "daemon/core/probe_placement.h"
#include "noop_probes.skel.h"

namespace {

struct Options {
  pid_t pid = 0;
  bool free_at_entry = false;
};

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
    } else {
      return std::nullopt;
    }
  }
  if (o.pid == 0) return std::nullopt;
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
lw::Result<std::string> find_libc(pid_t pid) {
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
        is_libc_name(path)) {
      return "/proc/" + std::to_string(pid) + "/root" + path;
    }
  }
  return lw::Error{ENOENT, "no executable libc mapping in " + maps_path};
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

int run(const Options& opt) {
  // Block the stop signals before attaching so a SIGINT that arrives while
  // attaching is not lost (it stays pending for sigtimedwait).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);

  auto libc = find_libc(opt.pid);
  if (!libc) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", libc.error().message.c_str());
    return 1;
  }
  auto elf = lw::ElfFile::open_path(*libc);
  if (!elf) {
    std::fprintf(stderr, "lw_bench_noop: %s\n", elf.error().message.c_str());
    return 1;
  }
  auto malloc_probe = resolve(**elf, "malloc", false);
  auto free_probe = resolve(**elf, "free", !opt.free_at_entry);
  for (const auto* r : {&malloc_probe, &free_probe}) {
    if (!*r) {
      std::fprintf(stderr, "lw_bench_noop: %s\n", r->error().message.c_str());
      return 1;
    }
  }

  std::unique_ptr<noop_probes, SkelDeleter> skel(noop_probes__open_and_load());
  if (!skel) {
    std::fprintf(stderr, "lw_bench_noop: load BPF programs: %s\n", std::strerror(errno));
    return 1;
  }
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
    std::fprintf(stderr, "usage: %s -p PID [--free-at-entry]\n", argv[0]);
    return 2;
  }
  return run(*opt);
}
