// SPDX-License-Identifier: Apache-2.0
#include "engine/uprobe_links.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "core/policy/overhead_policy.h"

namespace lw {

namespace {

constexpr uint32_t kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN

// bpf_attr for BPF_LINK_CREATE with uprobe_multi (and sessions, the same
// layout), as in the kernel's uapi (checked against vmlinux.h's union bpf_attr).
struct UprobeMultiAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(offsetof(UprobeMultiAttr, path) == 16 && offsetof(UprobeMultiAttr, cnt) == 48 &&
                  offsetof(UprobeMultiAttr, pid) == 56,
              "uprobe_multi bpf_attr layout");

// A trivial kprobe-type program loaded for `attach_type`; -1 if refused.
int load_trivial(uint32_t attach_type) {
  const struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts,
              .expected_attach_type = static_cast<enum bpf_attach_type>(attach_type));
  return bpf_prog_load(BPF_PROG_TYPE_KPROBE, "lw_probe_feat", "GPL", insns, 2, &opts);
}

}  // namespace

bool kernel_has_uprobe_multi() {
  const int fd = load_trivial(kAttachUprobeMulti);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool kernel_has_uretprobe_syscall() {
  FILE* f = std::fopen("/proc/kallsyms", "re");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr)
    found = std::strstr(line, " __x64_sys_uretprobe\n") != nullptr;
  std::fclose(f);
  return found;
}

bool kernel_serializes_uprobe_hits() {
  struct utsname u {};
  return uname(&u) != 0 || release_serializes_uprobe_hits(u.release);
}

bool kernel_has_uprobe_session() {
  // A kernel that does not know the attach type may still load the program
  // (older kernels do not check a kprobe program's expected attach type),
  // so try a link on a path that does not exist: a kernel with sessions
  // gets as far as the path lookup (ENOENT), one without refuses the type
  // (EINVAL) first.
  const int prog = load_trivial(kAttachUprobeSession);
  if (prog < 0) return false;
  const std::vector<uint64_t> offsets = {0}, cookies = {0};
  Result<int> link = create_uprobe_link(prog, kAttachUprobeSession, 0,
                                        "/nonexistent/leakwatch-session-probe", offsets, cookies, false);
  close(prog);
  if (link) {
    close(*link);
    return true;
  }
  return link.error().code == ENOENT;
}

Result<int> create_uprobe_link(int prog_fd, uint32_t attach_type, pid_t pid, const std::string& path,
                               const std::vector<uint64_t>& offsets,
                               const std::vector<uint64_t>& cookies, bool retprobe) {
  UprobeMultiAttr attr = {};
  attr.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.attach_type = attach_type;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.multi_flags = retprobe ? kUprobeMultiReturn : 0;
  attr.pid = static_cast<uint32_t>(pid);
  const int fd = static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
  if (fd < 0)
    return errno_error(std::string(attach_type == kAttachUprobeSession ? "attaching uprobe session"
                                                                      : "attaching uprobe_multi") +
                       " at " + path);
  return fd;
}

}  // namespace lw
