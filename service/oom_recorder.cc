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

std::string oom_report_file_name(double timestamp, pid_t pid) {
  char name[64];
  std::snprintf(name, sizeof name, "oom-%013" PRIu64 "-%d.json",
                static_cast<uint64_t>(std::max(0.0, timestamp) * 1000.0), static_cast<int>(pid));
  return name;
}

void OomRecorder::load() {
  const OomConfig& c = state_.config.oom;
  if (c.report_dir.empty()) return;
  std::vector<std::string> names = report_files(c.report_dir);
  auto reports = std::make_shared<std::vector<StoredOomReport>>();
  size_t skipped = 0;
  // Newest first, at most max_reports.
  for (auto it = names.rbegin(); it != names.rend() && reports->size() < c.max_reports; ++it) {
    std::optional<std::string> text = read_small_file(c.report_dir + "/" + *it);
    nlohmann::json j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("timestamp") || !j["timestamp"].is_number()) {
      ++skipped;
      continue;
    }
    StoredOomReport r;
    r.timestamp = j["timestamp"].get<double>();
    r.json = j.dump();
    const std::string reason = j.value("reason", "");
    if (reason != "gpu_oom" && reason != "sigkill")  // nothing killed, or not for memory
      state_.counters.oom_last_kill_timestamp = std::max(state_.counters.oom_last_kill_timestamp, r.timestamp);
    reports->push_back(std::move(r));
  }
  std::stable_sort(reports->begin(), reports->end(),
                   [](const StoredOomReport& a, const StoredOomReport& b) { return a.timestamp > b.timestamp; });
  state_.oom_reports = std::move(reports);
  if (!names.empty())
    LW_LOG_INFO("OOM reports: %zu read back from %s (%zu unreadable)", state_.oom_reports->size(),
                c.report_dir.c_str(), skipped);
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

  const Config& config = state_.config;
  OomReport r;
  const uint64_t now_ns = monotonic_ns();
  const double age_s = now_ns > kill.event_ns ? static_cast<double>(now_ns - kill.event_ns) / 1e9 : 0;
  r.timestamp = unix_now() - age_s;
  r.reason = kill.gpu_oom                                  ? KillReason::kGpuOom
             : kill.sigkill && is_oom_sender(kill.sender_comm) ? KillReason::kOomSender
             : kill.sigkill                                   ? KillReason::kSigkill
             : kill.memcg                                     ? KillReason::kMemcgOom
                                                              : KillReason::kGlobalOom;
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

  // The file name is known before the text: the report names its file.
  if (!config.oom.report_dir.empty())
    r.file = config.oom.report_dir + "/" + oom_report_file_name(r.timestamp, kill.pid);
  if (kill.gpu_oom && !r.file.empty())  // a process may have several: one per (device, window)
    r.file.insert(r.file.size() - 5, "-gpu" + std::to_string(kill.gpu_device));
  r.report_latency_s = static_cast<double>(monotonic_ns() - kill.event_ns) / 1e9;
  nlohmann::json doc = to_json(r);
  std::string text = doc.dump();
  if (kill.gpu_oom)
    gpu_reports_[{kill.pid, t.info.identity.start_time, kill.gpu_device}] =
        GpuReport{std::move(doc), r.file, r.process.target};
  if (!r.file.empty() && write_file(r, text).empty()) {
    ++state_.counters.oom_report_write_failures;
  }

  auto reports = std::make_shared<std::vector<StoredOomReport>>();
  reports->reserve(std::min<size_t>(state_.oom_reports->size() + 1, config.oom.max_reports));
  reports->push_back({r.timestamp, std::move(text)});
  for (const StoredOomReport& old : *state_.oom_reports) {
    if (reports->size() >= config.oom.max_reports) break;
    reports->push_back(old);
  }
  state_.oom_reports = std::move(reports);
  if (for_memory(r.reason))
    ++state_.counters.oom_kills[{r.process.target, kill_reason_name(r.reason)}];
  else
    ++state_.counters.sigkills[r.process.target];
  if (!kill.gpu_oom && for_memory(r.reason))  // not killed, or not for memory
    state_.counters.oom_last_kill_timestamp = std::max(state_.counters.oom_last_kill_timestamp, r.timestamp);

  log_report(kill, r);
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
  if (!g.file.empty() && access(g.file.c_str(), F_OK) == 0 && write_text(g.file, text).empty())
    ++state_.counters.oom_report_write_failures;
  auto reports = std::make_shared<std::vector<StoredOomReport>>(*state_.oom_reports);
  for (StoredOomReport& r : *reports)
    if (r.json == old_text) {
      r.json = text;
      break;
    }
  state_.oom_reports = std::move(reports);
  state_.dirty = true;
}

std::string OomRecorder::write_file(const OomReport& report, const std::string& text) {
  return write_text(report.file, text);
}

std::string OomRecorder::write_text(const std::string& file, const std::string& text) {
  const std::string& dir = state_.config.oom.report_dir;
  if (!mkdirs(dir)) {
    log_once("oom_dir", "OOM reports: cannot create " + dir + ": " + std::strerror(errno));
    return {};
  }
  const std::string tmp = file + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    log_once("oom_write", "OOM reports: cannot write in " + dir + ": " + std::strerror(errno));
    return {};
  }
  size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // No fsync: a report must survive a daemon restart, which the page cache
  // does; a storm of kills must not wait on the disk.
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), file.c_str()) != 0) {
    log_once("oom_write", "OOM reports: cannot write " + file + ": " + std::strerror(errno));
    unlink(tmp.c_str());
    return {};
  }
  prune_dir(dir);
  return file;
}

void OomRecorder::prune_dir(const std::string& dir) {
  std::vector<std::string> names = report_files(dir);
  const size_t keep = state_.config.oom.max_reports;
  for (size_t i = 0; i + keep < names.size(); ++i) unlink((dir + "/" + names[i]).c_str());
}

}  // namespace lw
