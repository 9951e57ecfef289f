// SPDX-License-Identifier: Apache-2.0
#include "view/daemon_view.h"

namespace lw {

const char* mode_name(TargetMode mode) {
  switch (mode) {
    case TargetMode::kFull: return "full";
    case TargetMode::kLight: return "light";
    case TargetMode::kAuto: return "auto";
  }
  return "?";
}

double start_time_unix_seconds(const DaemonSnapshot& snap, uint64_t ticks) {
  const double boot = snap.self.boot_time, tick = snap.self.ticks_per_second;
  if (boot <= 0 || tick <= 0) return 0;
  // Whole ticks (10 ms): the precision of the kernel's figure.
  return boot + static_cast<double>(ticks) / tick;
}

}  // namespace lw
