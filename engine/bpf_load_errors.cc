// SPDX-License-Identifier: Apache-2.0
#include "engine/bpf_load_errors.h"

#include <linux/capability.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "core/platform/capabilities.h"
#include "core/platform/log.h"

namespace lw {

namespace {

std::string kernel_release() {
  struct utsname u {};
  return uname(&u) == 0 ? std::string(u.release) : std::string("unknown");
}

// The verifier's last word on a program it refused ("prog 'lw_entry':
// combined stack size of 3 calls is 544. Too large"), kept whatever the log
// level: load_error() says it instead of blaming capabilities.
std::mutex verifier_refusal_mu;
std::string verifier_refusal;

void keep_verifier_refusal(std::string_view msg) {
  const size_t begin = msg.find("-- BEGIN PROG LOAD LOG --"), end = msg.find("-- END PROG LOAD LOG --");
  if (begin == std::string_view::npos || end == std::string_view::npos || end < begin) return;
  std::string_view log = msg.substr(begin, end - begin);
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.remove_suffix(1);
  std::string_view last = log.substr(log.rfind('\n') == std::string_view::npos ? 0 : log.rfind('\n') + 1);
  // A statistics line ("processed N insns ...") follows the reason.
  if (last.rfind("processed ", 0) == 0 || last.rfind("verification time", 0) == 0) {
    log = log.substr(0, log.rfind('\n') == std::string_view::npos ? 0 : log.rfind('\n'));
    last = log.substr(log.rfind('\n') == std::string_view::npos ? 0 : log.rfind('\n') + 1);
  }
  std::string prog;
  if (size_t q = msg.find("prog '"); q != std::string_view::npos && q < begin) {
    const size_t e = msg.find('\'', q + 6);
    if (e != std::string_view::npos) prog = std::string(msg.substr(q, e + 1 - q)) + ": ";
  }
  std::lock_guard<std::mutex> lock(verifier_refusal_mu);
  verifier_refusal = prog + std::string(last.substr(0, 300));
}

}  // namespace

// libbpf prints verifier logs and attach warnings here. They go to our log
// at debug level only (--log-level debug): otherwise our own error says
// what is wrong, and libbpf's generic advice (e.g. "make sure your kernel
// supports BPF ... RLIMIT_MEMLOCK" when a capability is missing) would come
// first and mislead. libbpf's own debug chatter is dropped.
int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  va_list copy;
  va_copy(copy, args);
  const int need = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (need <= 0) return need;
  std::string line(static_cast<size_t>(need) + 1, '\0');
  vsnprintf(line.data(), line.size(), fmt, args);
  line.resize(static_cast<size_t>(need));
  if (level == LIBBPF_WARN) keep_verifier_refusal(line);
  if (log_level() > LogLevel::kDebug || getenv("LEAKWATCH_LIBBPF_QUIET") != nullptr) return need;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  LW_LOG_DEBUG("libbpf: %s", line.c_str());
  return need;
}

Error load_error(int err) {
  if (access("/sys/bus/event_source/devices/uprobe/type", R_OK) != 0)
    return Error{ENOTSUP, "kernel has no uprobe perf PMU (/sys/bus/event_source/devices/uprobe): "
                          "leakwatch needs CONFIG_UPROBE_EVENTS"};
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    return Error{ENOTSUP, "kernel has no BTF (/sys/kernel/btf/vmlinux missing): leakwatch needs "
                          "a kernel >= 5.8 built with CONFIG_DEBUG_INFO_BTF"};
  if (err == EPERM || err == EACCES) {
    // Tracing programs (uprobe, raw_tp, tp_btf) need CAP_PERFMON on top of CAP_BPF.
    const std::string missing = missing_capabilities({CAP_BPF, CAP_PERFMON});
    std::string refusal;
    {
      std::lock_guard<std::mutex> lock(verifier_refusal_mu);
      refusal = verifier_refusal;
    }
    // Not a permission: the verifier refuses with EACCES too.
    if (missing.empty() && !refusal.empty())
      return Error{EACCES, "the kernel's BPF verifier refused " + refusal + " (kernel " + kernel_release() +
                               "): this build of leakwatch cannot load on this kernel; `leakwatch run "
                               "--log-level debug` shows the verifier's log (libbpf lines)"};
    return Error{EPERM, missing.empty()
                            ? "permission denied loading BPF: run as root or with CAP_BPF and CAP_PERFMON"
                            : "permission denied loading BPF: missing " + missing +
                                  " (loading tracing programs needs CAP_BPF and CAP_PERFMON)"};
  }
  return errno_error("loading BPF programs", err);
}

}  // namespace lw
