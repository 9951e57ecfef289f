// SPDX-License-Identifier: Apache-2.0
// What `leakwatch top` prints (docs/cli.md): a table per snapshot, or one
// JSON object per line. Reads only the view (view/process_view.h).
// Thread-safety: writes to stdout; call from one thread.
#pragma once

#include <cstdint>
#include <string>

#include "view/process_view.h"

namespace lw {

// "1.5 MiB".
std::string human_bytes(uint64_t bytes);
// Prints one snapshot (table or one JSON line) and flushes stdout.
void print_snapshot(const ProcessSnapshot& snap, bool json);

}  // namespace lw
