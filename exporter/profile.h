/* SPDX-License-Identifier: Apache-2.0 */
// A process snapshot as a pprof heap profile (docs/api.md): one sample per
// site, plus one "[other sites]" sample per kind holding what the snapshot
// did not list, so the profile's totals equal the process's.
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "core/pprof.h"
#include "view/process_view.h"

namespace lw {

PprofInput profile_input(const ProcessSnapshot& snap, double started_unix_s);

}  // namespace lw
