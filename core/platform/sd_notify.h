/* SPDX-License-Identifier: Apache-2.0 */
// The systemd notify protocol, without libsystemd: a datagram to the unix
// socket named by NOTIFY_SOCKET ("@name" is the abstract namespace).
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace lw {

// Sends `state` (e.g. "READY=1"). Returns false when not under systemd
// (no NOTIFY_SOCKET) or on error.
bool sd_notify_send(const std::string& state);

// WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or
// ours), else nullopt.
std::optional<std::chrono::microseconds> sd_watchdog_interval();

}  // namespace lw
