/* SPDX-License-Identifier: Apache-2.0 */
// Daemon snapshots as pprof heap profiles (docs/api.md): one sample per
// site, plus one "[other sites]" sample per kind holding what the snapshot
// did not list, so the profile's totals equal the process's. The rest row
// has a function name and a mapping (a pseudo-module "[other sites]"), as
// profile ingesters expect of every sample's location.
// Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "core/formats/pprof.h"
#include "view/daemon_view.h"
#include "view/process_view.h"

namespace lw {

// One process.
PprofInput profile_input(const ProcessSnapshot& snap, double started_unix_s);

// Every traced process in one profile: each sample labelled with pid
// (number), comm, and namespace and pod where known, beside kind, so
// `go tool pprof -tagfocus comm=python3` (or pid=N) selects one.
PprofInput profile_input_all(const DaemonSnapshot& snap);

}  // namespace lw
