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

}  // namespace lw
