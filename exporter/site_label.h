// SPDX-License-Identifier: Apache-2.0
// The `site` label of a site's series in /metrics (exporter/metrics.cc).
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "view/process_view.h"

namespace lw {

// "leaf_function (file:line)", short, for the `site` label: the innermost
// Python frame where the stack has one (the function that keeps the
// memory, not the interpreter's allocator), else the leaf. Full stacks go
// to the API and pprof, never into labels.
std::string site_label(const SiteSnapshot& s);

}  // namespace lw
