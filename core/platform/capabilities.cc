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
  switch (cap) {
    case CAP_DAC_OVERRIDE: return "CAP_DAC_OVERRIDE";
    case CAP_DAC_READ_SEARCH: return "CAP_DAC_READ_SEARCH";
    case CAP_KILL: return "CAP_KILL";
    case CAP_SYS_PTRACE: return "CAP_SYS_PTRACE";
    case CAP_SYS_ADMIN: return "CAP_SYS_ADMIN";
    case CAP_SYS_RESOURCE: return "CAP_SYS_RESOURCE";
    case CAP_PERFMON: return "CAP_PERFMON";
    case CAP_BPF: return "CAP_BPF";
    case CAP_CHECKPOINT_RESTORE: return "CAP_CHECKPOINT_RESTORE";
    default: return "capability " + std::to_string(cap);
  }
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
