// SPDX-License-Identifier: Apache-2.0
#include "service/oom_recorder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/analysis/analyzer.h"
#include "core/platform/clock.h"
#include "core/platform/log.h"
#include "core/proc/procfs.h"

namespace lw {

namespace {

constexpr size_t kMaxReportFileBytes = 64u << 20;
constexpr size_t kMaxReportedKeys = 65536;

bool is_report_name(const std::string& name) {
  return name.size() > 9 && name.starts_with("oom-") && name.ends_with(".json");
}

std::vector<std::string> report_files(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (is_report_name(name)) names.push_back(std::move(name));
  }
  closedir(d);
  std::sort(names.begin(), names.end());  // oldest first
  return names;
}

std::optional<std::string> read_small_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxReportFileBytes) {
      close(fd);
      return std::nullopt;
    }
  }
  close(fd);
  return out;
}

bool mkdirs(const std::string& dir) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (path.empty()) continue;
    if (mkdir(path.c_str(), 0750) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// The name of the frame a reader should look at first: the first with a
// function name, else the leaf's display name.
std::string top_frame_name(const SiteSnapshot& s) {
  for (const Frame& f : s.frames)
    if (!f.function.empty()) return f.function;
  return s.frames.empty() ? std::string("?") : frame_display_name(s.frames.front());
}

// The report's log line: a GPU OOM, a kill for memory, or another SIGKILL.
void log_report(const ProcessKill& kill, const OomReport& r) {
  if (kill.gpu_oom) {
    LW_LOG_WARN("GPU OOM: pid %d (%s), target %s, %s() on device %d, %" PRIu64 " bytes asked; %s; report %s",
                kill.pid, r.process.identity.comm.c_str(), r.process.target.c_str(),
                cuda_alloc_function_name(kill.gpu_func), kill.gpu_device, kill.gpu_requested,
                r.snapshot.sites.empty() ? "no site recorded"
                                         : ("top site " + top_frame_name(r.snapshot.sites.front())).c_str(),
                r.file.empty() ? "(no file)" : r.file.c_str());
    return;
  }
  std::string why = kill.sigkill ? "SIGKILL from pid " + std::to_string(kill.sender_pid) + " (" + kill.sender_comm + ")"
                    : kill.memcg ? "memory cgroup OOM, limit " + std::to_string(kill.limit_bytes >> 20) + " MiB"
                                 : std::string("global OOM");
  std::string top = "no site recorded";
  if (!r.snapshot.sites.empty()) {
    const SiteSnapshot& s = r.snapshot.sites.front();
    top = "top site " + top_frame_name(s) + " (" + kind_name(s.kind) + ", " +
          std::to_string(s.live_bytes >> 10) + " KiB live)";
  }
  // Not "OOM kill" for an operator's kill -9 (issue 35): it pages no one.
  const char* what = for_memory(r.reason) ? "OOM kill" : "SIGKILL, not for memory (not a known OOM killer)";
  LW_LOG_WARN("%s: pid %d (%s), target %s, %s; RSS %" PRIu64 " MiB, %s%s; report %s", what, kill.pid,
              r.process.identity.comm.c_str(), r.process.target.c_str(), why.c_str(), r.rss_bytes >> 20,
              top.c_str(), r.light ? " [light mode]" : "", r.file.empty() ? "(no file)" : r.file.c_str());
}

}  // namespace

std::string oom_report_file_name(double timestamp, pid_t pid) { return oom_report_id(timestamp, pid, -1) + ".json"; }

std::string oom_report_id(double timestamp, pid_t pid, int gpu_device) {
  char name[64];
  std::snprintf(name, sizeof name, "oom-%013" PRIu64 "-%d",
                static_cast<uint64_t>(std::max(0.0, timestamp) * 1000.0), static_cast<int>(pid));
  return gpu_device >= 0 ? name + ("-gpu" + std::to_string(gpu_device)) : std::string(name);
}

OomRetentionLimits retention_limits(const OomConfig& c) {
  OomRetentionLimits l;
  l.max_reports = c.max_reports;
  l.max_total_bytes = c.max_total_bytes;
  l.max_sigkill_reports_per_uid = c.max_sigkill_reports_per_uid;
  l.sigkill_reports_per_uid_per_minute = c.sigkill_reports_per_uid_per_minute;
  return l;
}

namespace {

// What retention knows of a report read back from `name` in oom.report_dir.
OomReportMeta meta_of(const nlohmann::json& j, const std::string& name, size_t bytes) {
  OomReportMeta m;
  m.id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>() : name.substr(0, name.size() - 5);
  const std::string reason = j.value("reason", "");
  m.tier = reason == "sigkill" ? OomReportTier::kSigkill : OomReportTier::kForMemory;
  const nlohmann::json* process = j.contains("process") && j["process"].is_object() ? &j["process"] : nullptr;
  if (process && process->contains("real_uid") && (*process)["real_uid"].is_number_unsigned())
    m.uid = (*process)["real_uid"].get<uint32_t>();
  m.bytes = bytes;
  return m;
}

}  // namespace

void OomRecorder::load() {
  const OomConfig& c = state_.config.oom;
  if (c.report_dir.empty()) return;
  std::vector<std::string> names = report_files(c.report_dir);
  std::vector<StoredOomReport> reports;
  size_t skipped = 0;
  // Newest first, at most max_reports.
  for (auto it = names.rbegin(); it != names.rend() && reports.size() < c.max_reports; ++it) {
    std::optional<std::string> text = read_small_file(c.report_dir + "/" + *it);
    nlohmann::json j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("timestamp") || !j["timestamp"].is_number()) {
      ++skipped;
      continue;
    }
    StoredOomReport r;
    r.timestamp = j["timestamp"].get<double>();
    r.meta = meta_of(j, *it, text->size());
    if (!j.contains("id")) {  // written before reports had one (issue 32)
      j["id"] = r.meta.id;
      r.json = j.dump();
    } else {
      r.json = std::move(*text);
    }
    r.meta.bytes = r.json.size();
    r.file = c.report_dir + "/" + *it;
    const std::string reason = j.value("reason", "");
    if (reason != "gpu_oom" && reason != "sigkill")  // nothing killed, or not for memory
      state_.counters.oom_last_kill_timestamp = std::max(state_.counters.oom_last_kill_timestamp, r.timestamp);
    reports.push_back(std::move(r));
  }
  // The bounds as configured now (max_total_bytes, the per-user caps).
  retention_.set_limits(retention_limits(c));
  bool unused = false;
  state_.oom_reports = std::make_shared<std::vector<StoredOomReport>>(
      apply_retention(std::move(reports), std::string(), &unused));
  if (!names.empty()) {
    LW_LOG_INFO("OOM reports: %zu read back from %s (%zu unreadable)", state_.oom_reports->size(),
                c.report_dir.c_str(), skipped);
    prune_dir(c.report_dir);
  }
}

void OomRecorder::tick(double now_s) {
  const OomConfig& c = state_.config.oom;
  if (c.history_seconds == 0 || now_s - last_sample_s_ < c.history_interval_seconds) return;
  last_sample_s_ = now_s;
  sample_all();
}

void OomRecorder::sample_all() {
  const OomConfig& c = state_.config.oom;
  const double now = unix_now();
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (auto it = history_.begin(); it != history_.end();)
    it = state_.tracked.count(it->first) ? std::next(it) : history_.erase(it);
  const size_t max_samples = c.history_seconds / c.history_interval_seconds + 2;
  for (auto it = gpu_reports_.begin(); it != gpu_reports_.end();) {
    const pid_t pid = std::get<0>(it->first);
    if (state_.tracked.count(pid)) {
      ++it;
      continue;
    }
    gpu_limiter_.forget(pid);
    it = gpu_reports_.erase(it);
  }
  for (const auto& [pid, t] : state_.tracked) {
    MemorySample s;
    s.timestamp = now;
    if (std::optional<StatmPages> statm = read_statm_pages(pid)) s.rss_bytes = statm->resident * page;
    if (const HeapTracker* heap = tracer_.heap(pid))
      for (uint32_t k = 0; k < LW_KIND_MAX; ++k) s.live_bytes[k] = heap->live_bytes(k);
    std::deque<MemorySample>& h = history_[pid];
    h.push_back(s);
    while (h.size() > max_samples || (!h.empty() && now - h.front().timestamp > c.history_seconds)) h.pop_front();
  }
}

size_t OomRecorder::handle_kills() {
  std::vector<ProcessKill> kills = tracer_.take_kills();
  if (kills.empty()) return 0;
  symbol_wait_left_ = kSymbolWaitPerPoll;
  const Counters counters = tracer_.counters();
  const TracerStats stats = tracer_.stats();
  for (const ProcessKill& k : kills) {
    if (k.gpu_recovered)
      gpu_recovered(k);
    else
      record(k, counters, stats);
  }
  state_.dirty = true;
  return kills.size();
}

void OomRecorder::record(const ProcessKill& kill, const Counters& counters, const TracerStats& stats) {
  auto tracked = state_.tracked.find(kill.pid);
  if (tracked == state_.tracked.end()) return;
  const TrackedProcess& t = tracked->second;
  if (kill.gpu_oom) {
    if (gpu_suppressed(kill, t)) return;
  } else {
    const std::pair<pid_t, uint64_t> key{kill.pid, t.info.identity.start_time};
    if (!reported_.insert(key).second) return;  // one report per process
    reported_order_.push_back(key);
    if (reported_order_.size() > kMaxReportedKeys) {
      reported_.erase(reported_order_.front());
      reported_order_.pop_front();
    }
  }
  const KillReason reason = kill.gpu_oom                                  ? KillReason::kGpuOom
                            : kill.sigkill && is_oom_sender(kill.sender_comm) ? KillReason::kOomSender
                            : kill.sigkill                                   ? KillReason::kSigkill
                            : kill.memcg                                     ? KillReason::kMemcgOom
                                                                             : KillReason::kGlobalOom;
  retention_.set_limits(retention_limits(state_.config.oom));
  // A user's kill -9 of their own processes, past their rate: counted, no
  // report (issue 32). Decided before the report is built: that is the cost.
  const std::optional<uint32_t> uid = t.info.identity.real_uid;
  if (reason == KillReason::kSigkill && !retention_.admit_sigkill(uid, kill.event_ns)) {
    ++state_.counters.sigkills[t.info.target];
    ++state_.counters.oom_reports_dropped[static_cast<size_t>(OomDropCause::kRateLimited)];
    log_once("oom_sigkill_rate", "OOM reports: SIGKILLs (not for memory) of uid " + std::to_string(uid.value_or(0)) +
                                     "'s processes past oom.sigkill_reports_per_uid_per_minute: not reported "
                                     "(leakwatch_oom_reports_dropped_total{cause=\"rate_limited\"})");
    return;
  }
  OomReport r = build(kill, t, reason, counters, stats);
  if (!store(kill, r)) r.file.clear();
  if (for_memory(r.reason))
    ++state_.counters.oom_kills[{r.process.target, kill_reason_name(r.reason)}];
  else
    ++state_.counters.sigkills[r.process.target];
  if (!kill.gpu_oom && for_memory(r.reason))  // not killed, or not for memory
    state_.counters.oom_last_kill_timestamp = std::max(state_.counters.oom_last_kill_timestamp, r.timestamp);
  log_report(kill, r);
}

OomReport OomRecorder::build(const ProcessKill& kill, const TrackedProcess& t, KillReason reason,
                             const Counters& counters, const TracerStats& stats) {
  const Config& config = state_.config;
  OomReport r;
  const uint64_t now_ns = monotonic_ns();
  const double age_s = now_ns > kill.event_ns ? static_cast<double>(now_ns - kill.event_ns) / 1e9 : 0;
  r.timestamp = unix_now() - age_s;
  r.reason = reason;
  if (kill.gpu_oom) {
    r.gpu.device = kill.gpu_device;
    r.gpu.kind = kill.gpu_kind < LW_KIND_MAX ? kill.gpu_kind : static_cast<uint32_t>(LW_KIND_CUDA_DEVICE);
    r.gpu.requested_bytes = kill.gpu_requested;
    r.gpu.error_code = kill.gpu_error;
    r.gpu.func = kill.gpu_func;
    r.gpu.driver = kill.gpu_driver;
  }
  r.process = process_info(t);
  r.light = !r.process.heap_attached;
  r.limit_bytes = kill.limit_bytes;
  r.memcg_usage_bytes = kill.memcg_usage_bytes;
  r.sender_pid = kill.sender_pid;
  r.sender_comm = kill.sender_comm;
  auto an = state_.analyzers.find(kill.pid);
  const ProcessAnalyzer* analyzer = an == state_.analyzers.end() ? nullptr : &an->second;
  if (std::optional<ProcessSnapshot> snap =
          tracer_.snapshot(kill.pid, config.top_sites_per_process, analyzer, counters, stats))
    r.snapshot = std::move(*snap);
  // A process killed soon after its sites appeared (a fast leak) may have
  // frames the symbol thread has not named yet: the report is frozen, so
  // wait for them, within a budget shared by the kills of one poll (the
  // consumer is blocked meanwhile; the ring buffer absorbs it).
  auto pending = [&] {
    return std::any_of(r.snapshot.sites.begin(), r.snapshot.sites.end(),
                       [](const SiteSnapshot& s) { return s.symbols_pending; });
  };
  if (pending() && symbol_wait_left_.count() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    tracer_.wait_for_symbols(symbol_wait_left_);
    symbol_wait_left_ -= std::min(symbol_wait_left_, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                         std::chrono::steady_clock::now() - t0));
    if (std::optional<ProcessSnapshot> snap =
            tracer_.snapshot(kill.pid, config.top_sites_per_process, analyzer, counters, stats))
      r.snapshot = std::move(*snap);
  }
  if (auto h = history_.find(kill.pid); h != history_.end()) r.history.assign(h->second.begin(), h->second.end());
  r.rss_bytes = kill.rss_bytes ? kill.rss_bytes : r.history.empty() ? 0 : r.history.back().rss_bytes;
  MemorySample at_kill;
  at_kill.timestamp = r.timestamp;
  at_kill.rss_bytes = r.rss_bytes;
  for (uint32_t k = 0; k < LW_KIND_MAX; ++k) at_kill.live_bytes[k] = r.snapshot.kinds[k].live_bytes;
  r.history.push_back(at_kill);
  // A process may have several GPU reports: one per (device, window).
  r.id = oom_report_id(r.timestamp, kill.pid, -1);
  if (kill.gpu_oom) r.id += "-gpu" + std::to_string(kill.gpu_device);  // -gpu-1: device unknown
  r.report_latency_s = static_cast<double>(monotonic_ns() - kill.event_ns) / 1e9;
  return r;
}

bool OomRecorder::store(const ProcessKill& kill, OomReport& r) {
  const OomConfig& c = state_.config.oom;
  // The file name is known before the text: the report names its file.
  if (!c.report_dir.empty()) r.file = c.report_dir + "/" + r.id + ".json";
  nlohmann::json doc = to_json(r);
  if (cap_report_size(doc, c.max_report_bytes)) ++state_.counters.oom_reports_truncated;
  StoredOomReport entry;
  entry.timestamp = r.timestamp;
  entry.json = doc.dump();
  entry.meta = {r.id, oom_report_tier(r.reason), r.process.identity.real_uid, entry.json.size()};
  entry.file = r.file;
  // Retention before the write: a report that is not kept is not written.
  std::vector<StoredOomReport> kept;
  kept.reserve(state_.oom_reports->size() + 1);
  kept.push_back(entry);
  kept.insert(kept.end(), state_.oom_reports->begin(), state_.oom_reports->end());
  bool dropped = false;
  kept = apply_retention(std::move(kept), r.id, &dropped);
  if (!dropped && !r.file.empty()) {
    if (std::string error = write_text(r.file, entry.json); !error.empty()) {
      ++state_.counters.oom_report_write_failures;
      // Never a file that is not there (issue 32): null, and why.
      r.file.clear();
      r.file_error = std::move(error);
      doc["file"] = nullptr;
      doc["file_error"] = r.file_error;
      for (StoredOomReport& k : kept)
        if (k.meta.id == r.id) {
          k.json = doc.dump();
          k.meta.bytes = k.json.size();
          k.file.clear();
        }
    }
  }
  if (kill.gpu_oom && !dropped) {
    auto tracked = state_.tracked.find(kill.pid);
    const uint64_t start = tracked == state_.tracked.end() ? 0 : tracked->second.info.identity.start_time;
    gpu_reports_[{kill.pid, start, kill.gpu_device}] = GpuReport{std::move(doc), r.file, r.process.target};
  }
  state_.oom_reports = std::make_shared<std::vector<StoredOomReport>>(std::move(kept));
  if (!c.report_dir.empty() && !dropped) prune_dir(c.report_dir);
  return !dropped;
}

std::vector<StoredOomReport> OomRecorder::apply_retention(std::vector<StoredOomReport> kept,
                                                          const std::string& new_id, bool* new_dropped) {
  // Newest first, in the order of their ids (the paging cursor).
  std::stable_sort(kept.begin(), kept.end(),
                   [](const StoredOomReport& a, const StoredOomReport& b) { return a.meta.id > b.meta.id; });
  std::vector<OomReportMeta> metas;
  metas.reserve(kept.size());
  for (const StoredOomReport& k : kept) metas.push_back(k.meta);
  std::vector<bool> gone(kept.size(), false);
  for (const OomRetention::Eviction& e : retention_.evict(metas)) {
    gone[e.index] = true;
    ++state_.counters.oom_reports_dropped[static_cast<size_t>(e.cause)];
    if (!kept[e.index].file.empty()) unlink(kept[e.index].file.c_str());
  }
  std::vector<StoredOomReport> out;
  out.reserve(kept.size());
  *new_dropped = false;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!gone[i])
      out.push_back(std::move(kept[i]));
    else if (!new_id.empty() && kept[i].meta.id == new_id)
      *new_dropped = true;
  }
  return out;
}

bool OomRecorder::gpu_suppressed(const ProcessKill& kill, const TrackedProcess& t) {
  const GpuOomLimiter::Key key{kill.pid, t.info.identity.start_time, kill.gpu_device};
  auto standing = gpu_reports_.find(key);
  // The window is counted from the kernel event (monotonic seconds).
  if (gpu_limiter_.admit(key, static_cast<double>(kill.event_ns) / 1e9) || standing == gpu_reports_.end())
    return false;
  const std::string old_text = standing->second.json.dump();
  standing->second.json["suppressed"] = gpu_limiter_.suppressed(key);
  // Failing again: not recovered (until the next successful allocation).
  standing->second.json["recovered"] = false;
  standing->second.json["recovered_timestamp"] = nullptr;
  ++state_.counters.gpu_oom_suppressed[standing->second.target];
  update_gpu_report(key, old_text);
  return true;
}

void OomRecorder::gpu_recovered(const ProcessKill& kill) {
  auto tracked = state_.tracked.find(kill.pid);
  if (tracked == state_.tracked.end()) return;
  const GpuOomLimiter::Key key{kill.pid, tracked->second.info.identity.start_time, kill.gpu_device};
  auto standing = gpu_reports_.find(key);
  if (standing == gpu_reports_.end() || standing->second.json.value("recovered", false)) return;
  const std::string old_text = standing->second.json.dump();
  const uint64_t now_ns = monotonic_ns();
  const double age_s = now_ns > kill.event_ns ? static_cast<double>(now_ns - kill.event_ns) / 1e9 : 0;
  standing->second.json["recovered"] = true;
  standing->second.json["recovered_timestamp"] = unix_now() - age_s;
  update_gpu_report(key, old_text);
  LW_LOG_INFO("GPU OOM: pid %d recovered on device %d (an allocation there succeeded)", kill.pid, kill.gpu_device);
}

void OomRecorder::update_gpu_report(const GpuOomLimiter::Key& key, const std::string& old_text) {
  GpuReport& g = gpu_reports_.at(key);
  std::string text = g.json.dump();
  // The file is rewritten in place, unless oom.max_reports pruned it.
  if (!g.file.empty() && access(g.file.c_str(), F_OK) == 0 && !write_text(g.file, text).empty())
    ++state_.counters.oom_report_write_failures;
  auto reports = std::make_shared<std::vector<StoredOomReport>>(*state_.oom_reports);
  for (StoredOomReport& r : *reports)
    if (r.json == old_text) {
      r.json = text;
      r.meta.bytes = text.size();
      break;
    }
  state_.oom_reports = std::move(reports);
  state_.dirty = true;
}

std::string OomRecorder::write_text(const std::string& file, const std::string& text) {
  const std::string& dir = state_.config.oom.report_dir;
  if (!mkdirs(dir)) {
    std::string error = "cannot create " + dir + ": " + std::strerror(errno);
    log_once("oom_dir", "OOM reports: " + error);
    return error;
  }
  const std::string tmp = file + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    std::string error = "cannot write " + file + ": " + std::strerror(errno);
    log_once("oom_write", "OOM reports: " + error);
    return error;
  }
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // No fsync: a report must survive a daemon restart, which the page cache
  // does; a storm of kills must not wait on the disk.
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && rename(tmp.c_str(), file.c_str()) != 0) err = errno;
  if (err != 0) {
    std::string error = "cannot write " + file + ": " + std::strerror(err);
    log_once("oom_write", "OOM reports: " + error);
    unlink(tmp.c_str());
    return error;
  }
  return {};
}

void OomRecorder::prune_dir(const std::string& dir) {
  // The directory holds the reports kept and no more (issue 32): a file
  // left by an older daemon or over the bounds at start goes too.
  std::set<std::string> kept;
  for (const StoredOomReport& r : *state_.oom_reports)
    if (!r.file.empty()) kept.insert(r.file.substr(r.file.rfind('/') + 1));
  for (const std::string& name : report_files(dir))
    if (!kept.count(name)) unlink((dir + "/" + name).c_str());
}

}  // namespace lw
