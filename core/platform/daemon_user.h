/* SPDX-License-Identifier: Apache-2.0 */
// Who the daemon runs as once started (config `sandbox_user`; decision
// unprivileged-uid). Started as root, `leakwatch run` hands the
// directories it writes to that user, then switches its uids and gids to
// it, keeping only the capabilities of decision five-capabilities
// (core/platform/sandbox.h, switch_user). Started under another uid (the
// systemd unit's DynamicUser), nothing changes.
//
//   running_as_root(): any of the real, effective or saved uids is 0.
//   find_user(): the account's uid and primary gid, from the passwd
//     database (files, or whatever nsswitch names), before any thread or
//     filter exists.
//   prepare_user_dir(): makes a directory the daemon writes after the
//     switch writable by the user, without following a symlink at its end
//     and without taking over a directory another user owns.
//   set_daemon_user_name() / daemon_user_name(): the account the daemon
//     switched to, for /api/v1/status; set once at start, before any thread.
//
// Thread-safety: call from the main thread at start, before any thread
// starts; daemon_user_name() may be read from any thread afterwards.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/platform/result.h"

namespace lw {

struct DaemonUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

bool running_as_root();

// "no user 'NAME' on this host" when the account does not exist.
Result<DaemonUser> find_user(const std::string& name);

// What prepare_user_dir did to the directory.
enum class UserDirAction {
  kNone,       // already the user's, or writable by it as it is
  kCreated,    // created (missing parents too, 0755 and root's), then given to the user
  kHandedOver  // an existing directory of root's, not writable by everyone, given to the user
};

// `dir` (absolute) exists afterwards and the user can create files in it:
// created with `mode` if missing; an existing one of root's (the earlier
// root runs' /var/lib/leakwatch/oom) is chowned to the user; one owned by
// anybody else that the user cannot write, a symlink at the end, or not a
// directory, is an error saying so. Never chowns recursively: files
// already there stay root's and are still readable (CAP_DAC_READ_SEARCH)
// and replaceable (the directory is the user's).
Result<UserDirAction> prepare_user_dir(const std::string& dir, mode_t mode, const DaemonUser& user);

void set_daemon_user_name(std::string name);
const std::string& daemon_user_name();

// After a switch, signals sent by processes other than root's are not
// obeyed (the account's other processes could send them): the flag, set
// once at start, and the count of those refused (async-signal-safe).
void set_signals_from_root_only();
bool signals_from_root_only();
void note_signal_refused();
uint64_t signals_refused();

}  // namespace lw
