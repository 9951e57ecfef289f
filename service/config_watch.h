// SPDX-License-Identifier: Apache-2.0
// Config watching: the config file's directory under inotify (an editor's
// rename and a Kubernetes ConfigMap's "..data" swap included), the file
// loaded again on change or SIGHUP, and which tracked processes a new
// config drops. A bad file keeps the old config running and is counted.
// Daemon::reload applies what reload() returns (the parts it touches are
// the discovery's and the overhead controller's).
//
// Thread-safety: not thread-safe; only the consumer thread (Daemon::run)
// calls it.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/platform/fd.h"
#include "service/daemon_state.h"

namespace lw {

// A config loaded again, and what it changes for the tracked processes.
struct ConfigReload {
  Config next;
  // Processes of removed or changed targets, and processes (matched
  // themselves, not forked from a target) the new selectors no longer give
  // their target: they are detached, then everything is matched again.
  std::vector<pid_t> drop;
};

class ConfigWatcher {
 public:
  // Watches the directory of `path`; "" (no --config) watches nothing.
  explicit ConfigWatcher(std::string path);

  // Whether the file may have changed since the last call (drains the
  // pending inotify events; false without a watch).
  bool changed();
  // Loads the file again (counts reloads_total). nullopt when it is
  // rejected: the errors are logged, reload_failures_total counted and
  // last_reload_successful cleared; the caller keeps the old config.
  std::optional<ConfigReload> reload(DaemonState& state) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Fd inotify_;
};

// Which tracked processes `next` drops (ConfigReload::drop), pure.
std::vector<pid_t> processes_to_drop(const Config& current, const Config& next,
                                     const std::map<pid_t, TrackedProcess>& tracked);

}  // namespace lw
