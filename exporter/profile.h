/* SPDX-License-Identifier: Apache-2.0 */
// A process snapshot as a pprof heap profile (docs/api.md): one sample per
// site, plus one "[other sites]" sample per kind holding what the snapshot
// did not list, so the profile's totals equal the process's.
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/pprof.h"
#include "daemon/core/proc_maps.h"
#include "daemon/kernel/snapshot.h"

namespace lw {

PprofInput profile_input(const ProcessSnapshot& snap, double started_unix_s);

// The file mappings of a process as pprof mappings.
std::vector<PprofMapping> profile_mappings(const ParsedMaps& maps);

}  // namespace lw
