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

// Connects a socket to NOTIFY_SOCKET now, which every later
// sd_notify_send uses: the daemon calls it as root before switching to
// `sandbox_user` (decision unprivileged-uid), since a socket that only root
// may write (a test's, a hand-made one; systemd's own is 0777) admits a
// connected socket's datagrams, not the new uid's sendto. Call before any
// thread starts. False when not under systemd or on error (then each
// sd_notify_send tries on its own, as before).
bool sd_notify_connect();

// WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID unset or
// ours), else nullopt.
std::optional<std::chrono::microseconds> sd_watchdog_interval();

}  // namespace lw
