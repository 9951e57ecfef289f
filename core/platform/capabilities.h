/* SPDX-License-Identifier: Apache-2.0 */
// This process's effective capabilities, so that a permission error can
// name the capability that is missing (the systemd unit and the DaemonSet
// grant a fixed set; README, "Capabilities").
// Thread-safety: thread-safe (reads /proc/self/status on each call).
#pragma once

#include <initializer_list>
#include <string>

namespace lw {

// Whether `cap` (CAP_* from linux/capability.h) is in the effective set.
// True when the set cannot be read: never blame a capability on a guess.
bool has_capability(int cap);

// "CAP_X" or "CAP_X and CAP_Y": those of `caps` not effective now; "" if
// all are.
std::string missing_capabilities(std::initializer_list<int> caps);

// The name of a capability, e.g. "CAP_BPF".
std::string capability_name(int cap);

}  // namespace lw
