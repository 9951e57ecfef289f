// SPDX-License-Identifier: Apache-2.0
#include "core/platform/capabilities.h"

#include <linux/capability.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

namespace lw {

namespace {

std::optional<unsigned long long> effective_set() {
  FILE* f = fopen("/proc/self/status", "re");
  if (f == nullptr) return std::nullopt;
  char line[256];
  std::optional<unsigned long long> eff;
  while (fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (sscanf(line, "CapEff: %llx", &v) == 1) {
      eff = v;
      break;
    }
  }
  fclose(f);
  return eff;
}

}  // namespace

std::string capability_name(int cap) {
  // capabilities(7), by number: every capability the kernel has today
  // (CAP_LAST_CAP is 40), so a log line never mixes names and numbers.
  static constexpr const char* kNames[] = {
      "CAP_CHOWN",          "CAP_DAC_OVERRIDE",   "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
      "CAP_FSETID",         "CAP_KILL",           "CAP_SETGID",          "CAP_SETUID",
      "CAP_SETPCAP",        "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
      "CAP_NET_ADMIN",      "CAP_NET_RAW",        "CAP_IPC_LOCK",        "CAP_IPC_OWNER",
      "CAP_SYS_MODULE",     "CAP_SYS_RAWIO",      "CAP_SYS_CHROOT",      "CAP_SYS_PTRACE",
      "CAP_SYS_PACCT",      "CAP_SYS_ADMIN",      "CAP_SYS_BOOT",        "CAP_SYS_NICE",
      "CAP_SYS_RESOURCE",   "CAP_SYS_TIME",       "CAP_SYS_TTY_CONFIG",  "CAP_MKNOD",
      "CAP_LEASE",          "CAP_AUDIT_WRITE",    "CAP_AUDIT_CONTROL",   "CAP_SETFCAP",
      "CAP_MAC_OVERRIDE",   "CAP_MAC_ADMIN",      "CAP_SYSLOG",          "CAP_WAKE_ALARM",
      "CAP_BLOCK_SUSPEND",  "CAP_AUDIT_READ",     "CAP_PERFMON",         "CAP_BPF",
      "CAP_CHECKPOINT_RESTORE",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == CAP_CHECKPOINT_RESTORE + 1);
  if (cap >= 0 && static_cast<size_t>(cap) < sizeof(kNames) / sizeof(kNames[0])) return kNames[cap];
  return "CAP_" + std::to_string(cap);  // newer than this build: its number, still a capability
}

bool has_capability(int cap) {
  std::optional<unsigned long long> eff = effective_set();
  return !eff || cap < 0 || cap > 63 || (*eff >> cap) & 1ULL;
}

std::string missing_capabilities(std::initializer_list<int> caps) {
  std::optional<unsigned long long> eff = effective_set();
  if (!eff) return "";
  std::vector<std::string> missing;
  for (int cap : caps)
    if (cap >= 0 && cap <= 63 && !((*eff >> cap) & 1ULL)) missing.push_back(capability_name(cap));
  std::string out;
  for (size_t i = 0; i < missing.size(); ++i)
    out += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  return out;
}

}  // namespace lw
