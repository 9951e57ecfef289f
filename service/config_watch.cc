// SPDX-License-Identifier: Apache-2.0
#include "service/config_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/platform/log.h"
#include "service/discovery.h"

namespace lw {

ConfigWatcher::ConfigWatcher(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  // Watch the directory, not the file: editors and ConfigMap updates
  // replace the file (rename), which a watch on the old inode misses.
  inotify_.reset(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  std::string dir = path_;
  size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
  if (inotify_.valid() &&
      inotify_add_watch(inotify_.get(), dir.c_str(),
                        IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF) < 0) {
    LW_LOG_WARN("cannot watch %s for config changes (%s): reload on SIGHUP only", dir.c_str(),
                strerror(errno));
    inotify_.reset();
  }
}

bool ConfigWatcher::changed() {
  if (!inotify_.valid()) return false;
  alignas(struct inotify_event) char buf[4096];
  bool changed = false;
  std::string base = path_.substr(path_.rfind('/') + 1);
  for (;;) {
    ssize_t n = read(inotify_.get(), buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(buf + off);
      // A Kubernetes ConfigMap volume swaps a "..data" symlink: any change
      // in the directory may be ours.
      if (ev->len == 0 || base == ev->name || ev->name[0] == '.') changed = true;
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
    }
  }
  return changed;
}

std::optional<ConfigReload> ConfigWatcher::reload(DaemonState& state) const {
  ++state.counters.reloads_total;
  std::vector<ConfigError> errors;
  Result<Config> fresh = load_config_file(path_, &errors);
  if (!fresh) {
    ++state.counters.reload_failures_total;
    state.counters.last_reload_successful = false;
    for (const ConfigError& e : errors) LW_LOG_ERROR("config reload: %s", format_error(e).c_str());
    LW_LOG_ERROR("config reload failed: keeping the previous configuration");
    return std::nullopt;
  }
  ConfigReload r;
  r.next = std::move(*fresh);
  r.drop = processes_to_drop(state.config, r.next, state.tracked);
  const LimitsConfig& now = state.config.limits;
  const LimitsConfig& next = r.next.limits;
  if (next.live_map_entries != now.live_map_entries ||
      next.live_map_memory_percent != now.live_map_memory_percent ||
      next.stack_map_entries != now.stack_map_entries ||
      next.stack_gc_grace_seconds != now.stack_gc_grace_seconds ||
      r.next.ringbuf_bytes != state.config.ringbuf_bytes || r.next.listen != state.config.listen)
    LW_LOG_WARN("config reload: listen, ringbuf_bytes, kernel map sizes and the stack map's "
                "grace period take effect at the next restart");
  return r;
}

std::vector<pid_t> processes_to_drop(const Config& current, const Config& next,
                                     const std::map<pid_t, TrackedProcess>& tracked) {
  // Targets whose definition did not change keep their processes, state and
  // counters.
  std::vector<pid_t> drop;
  for (const auto& [pid, t] : tracked) {
    const TargetConfig* old_t = nullptr;
    const TargetConfig* new_t = nullptr;
    for (const TargetConfig& c : current.targets)
      if (c.name == t.info.target) old_t = &c;
    for (const TargetConfig& c : next.targets)
      if (c.name == t.info.target) new_t = &c;
    bool unchanged = old_t && new_t && config_equal_target(*old_t, *new_t);
    if (unchanged && t.info.parent == 0) {
      // Still this target's, and not excluded now?
      const TargetConfig* m = match_target(next, facts_of(t.info.identity));
      unchanged = m && m->name == t.info.target;
    }
    if (!unchanged) drop.push_back(pid);
  }
  return drop;
}

}  // namespace lw
