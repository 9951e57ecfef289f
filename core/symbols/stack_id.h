/* SPDX-License-Identifier: Apache-2.0 */
// The stable identity of a call stack: a hash of its frames as
// (build-id, file offset) pairs, so the same stack has the same id across
// restarts, hosts and address-space layouts. Frames without a build-id use
// the module path instead; Python frames hash as (file, qualified name,
// line). Inlined frames (Frame::inlined) are skipped:
// the id is of the physical frames only, so it is the same before symbols
// arrive, after, and whatever inline chains DWARF adds. Not the kernel's
// stack hash (that one is of raw addresses, which ASLR changes per process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/symbols/symbolizer.h"

namespace lw {

uint64_t stable_stack_id(const std::vector<Frame>& frames);
std::string stack_id_hex(uint64_t id);  // 16 lowercase hex digits

}  // namespace lw
