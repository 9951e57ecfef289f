// SPDX-License-Identifier: Apache-2.0
#include "exporter/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include <map>
#include <set>
#include <sstream>

#include <prometheus/text_serializer.h>

#include "exporter/http/http_server.h"
#include "exporter/profile.h"
#include "core/accounting/counters.h"

namespace lw {
namespace {

DaemonSnapshot sample_snapshot(const std::string& comm, int processes = 1, int sites = 3) {
  DaemonSnapshot snap;
  snap.timestamp = 1.8e9;
  snap.max_processes = 256;
  for (int p = 0; p < processes; ++p) {
    ProcessEntry e;
    e.process.identity.pid = 1000 + p;
    e.process.identity.start_time = 42;
    e.process.identity.comm = comm;
    e.process.identity.exe = "/usr/bin/" + comm;
    e.process.target = "t";
    e.process.mode = TargetMode::kFull;
    KindTotals& heap = e.snapshot.kinds[LW_KIND_HEAP];
    for (int s = 0; s < sites; ++s) {
      SiteSnapshot site;
      site.stack_id = 0x1000 + static_cast<uint64_t>(s);
      site.kind = LW_KIND_HEAP;
      site.live_bytes = 100;
      site.live_allocations = 1;
      site.allocated_bytes = 200;
      site.allocations = 2;
      Frame f;
      f.function = "leak_" + std::to_string(s);
      f.file = "/src/x.c";
      f.line = 10 + s;
      site.frames.push_back(f);
      e.snapshot.sites.push_back(site);
    }
    heap.live_bytes = 100ull * sites + 50;  // 50 bytes in sites not listed
    heap.live_allocations = static_cast<uint64_t>(sites) + 1;
    heap.allocated_bytes = 200ull * sites + 50;
    heap.allocations = 2ull * sites + 1;
    e.snapshot.live_bytes = heap.live_bytes;
    snap.processes.push_back(e);
  }
  return snap;
}

// promtool, when installed (scripts/install-deps.sh --with-test-tools).
bool promtool_accepts(const std::string& text, std::string* output) {
  if (access("/usr/bin/promtool", X_OK) != 0) return true;
  char path[] = "/tmp/lw_metrics_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return false;
  std::ofstream(path) << text;
  close(fd);
  std::string cmd = std::string("/usr/bin/promtool check metrics < ") + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) *output += buf;
  int rc = p ? pclose(p) : -1;
  unlink(path);
  return rc == 0;
}

TEST(Metrics, OtherRowMakesSitesSumToProcessTotals) {
  std::string text = render_metrics(sample_snapshot("svc"), {});
  EXPECT_NE(text.find("leakwatch_process_live_bytes{"), std::string::npos);
  EXPECT_NE(text.find("site=\"leak_0 (x.c:10)\""), std::string::npos);
  EXPECT_NE(text.find("stack_id=\"other\",site=\"other\"} 50"), std::string::npos) << text;
  std::string out;
  EXPECT_TRUE(promtool_accepts(text, &out)) << out;
}

// A site whose frames have no name (stripped, or not symbolized yet) is
// labelled with its leaf as module+offset, never "??" or "unknown".
TEST(Metrics, UnnamedLeafIsModulePlusOffset) {
  DaemonSnapshot snap = sample_snapshot("svc", 1, 1);
  Frame& f = snap.processes[0].snapshot.sites[0].frames[0];
  f = Frame{};
  f.module = "/usr/bin/python3.11";
  f.offset = 0xd0c9d;
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("site=\"python3.11+0xd0c9d\""), std::string::npos) << text;
  EXPECT_EQ(text.find("??"), std::string::npos);
}

// Every documented attach-error reason is exported from the start, at 0
// until it happens, so rate()/increase() and the dashboard see the first.
TEST(Metrics, AttachErrorReasonsStartAtZero) {
  DaemonSnapshot snap = sample_snapshot("svc");
  snap.counters.attach_errors["permission_denied"] = 3;
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_attach_errors_total{reason=\"permission_denied\"} 3"), std::string::npos) << text;
  for (const char* reason : {"no_such_process", "no_allocator_found", "file_changed", "kernel_map_full", "invalid", "other"})
    EXPECT_NE(text.find("leakwatch_attach_errors_total{reason=\"" + std::string(reason) + "\"} 0"), std::string::npos)
        << reason;
}

// Abandoned allocator calls (longjmp, exceptions) and calls past the
// kernel's uretprobe nesting limit are exported as failure reasons.
TEST(Metrics, UnwindingCountersAreFailureReasons) {
  DaemonSnapshot snap = sample_snapshot("svc");
  snap.kernel_counters[LW_CNT_CTX_ORPHANED] = 43;
  snap.kernel_counters[LW_CNT_RET_PROBE_OMITTED] = 11;
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_bpf_failures_total{reason=\"ctx_orphaned\"} 43"), std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_bpf_failures_total{reason=\"ret_probe_omitted\"} 11"), std::string::npos) << text;
  // Slot 31 is unassigned: not exported.
  EXPECT_EQ(text.find("reason=\"(null)\""), std::string::npos) << text;
}

TEST(Metrics, AllocatorInfoPerProcess) {
  DaemonSnapshot snap = sample_snapshot("svc", 2);
  AllocatorInfo& a = snap.processes[0].snapshot.allocator;
  a.support = "full";
  a.family = "jemalloc";
  a.object = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
  AllocatorInfo& b = snap.processes[1].snapshot.allocator;
  b.support = "unsupported";
  b.family = "unknown";
  b.object = "bad\xff\n\"path";  // a hostile path must not break the scrape
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_process_allocator_info{pid=\"1000\""), std::string::npos) << text;
  EXPECT_NE(text.find("allocator=\"jemalloc\",object=\"/usr/lib/x86_64-linux-gnu/"
                      "libjemalloc.so.2\",support=\"full\"} 1"),
            std::string::npos) << text;
  EXPECT_NE(text.find("allocator=\"unknown\""), std::string::npos) << text;
  EXPECT_NE(text.find("support=\"unsupported\"} 1"), std::string::npos) << text;
  std::string out;
  EXPECT_TRUE(promtool_accepts(text, &out)) << out;
  // And in the API.
  std::string procs = processes_json(snap);
  EXPECT_NE(procs.find("\"allocator\":{"), std::string::npos) << procs;
  EXPECT_NE(procs.find("\"family\":\"jemalloc\""), std::string::npos) << procs;
}

TEST(Metrics, HostileProcessNamesStillGiveAValidScrape) {
  for (std::string comm : {std::string("a\"b\n{x=\"1\"}"), std::string("bad\xff\xfe utf8"),
                           std::string("ctl\x01\x7f\x1b[31m"), std::string(5000, 'x'),
                           std::string("back\\slash")}) {
    std::string text = render_metrics(sample_snapshot(comm), {});
    std::string out;
    EXPECT_TRUE(promtool_accepts(text, &out)) << "comm=" << comm << "\n" << out;
    // No raw newline can split a sample line: every non-comment line parses
    // as `name{...} value`.
    EXPECT_EQ(text.find("\n{x="), std::string::npos);
  }
}

TEST(Metrics, SeriesCapIsCountedAndSelfMonitoringSurvives) {
  MetricsOptions opts;
  opts.max_series = 60;
  RenderStats stats;
  std::string text = render_metrics(sample_snapshot("svc", 50, 20), opts, &stats);
  EXPECT_GT(stats.series_dropped, 0u);
  EXPECT_LE(stats.series, opts.max_series + 1);
  EXPECT_NE(text.find("leakwatch_build_info"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_series_dropped " + std::to_string(stats.series_dropped)),
            std::string::npos);
}

// sample line "name{labels} value" -> value, comments skipped.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(Metrics, AttachLatencyHistogramAndPidReuseCounters) {
  DaemonSnapshot snap = sample_snapshot("svc");
  snap.counters.attach_latency.observe(0.0007);
  snap.counters.attach_latency.observe(0.003);
  snap.counters.attach_latency.observe(60);
  snap.counters.pid_reuse_detected = 5;
  snap.counters.discoveries_deferred = 7;
  snap.counters.discoveries_dropped = 2;
  snap.tracer_stats.stale_exits = 2;
  const std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("# TYPE leakwatch_attach_latency_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_bucket{le=\"0.0005\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_bucket{le=\"30\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_attach_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_pid_reuse_detected_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_discoveries_deferred_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_discoveries_dropped_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_stale_exits_total 2\n"), std::string::npos);
}

TEST(Metrics, OwnSerializerMatchesPrometheusCpp) {
  DaemonSnapshot snap = sample_snapshot("a\"b\n{x=\"1\"} \\ q", 3, 4);
  snap.counters.attach_latency.observe(0.004);  // a histogram among the families
  snap.processes[0].snapshot.sites[0].leak_rate_bytes_per_second = 1.0 / 3.0;
  std::vector<prometheus::MetricFamily> families = build_metric_families(snap, {}, nullptr);
  std::string ours;
  serialize_text(families, ours);
  std::ostringstream theirs;
  prometheus::TextSerializer().Serialize(theirs, families);
  auto a = parse_samples(ours), b = parse_samples(theirs.str());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : b) {
    ASSERT_TRUE(a.count(key)) << key;
    EXPECT_DOUBLE_EQ(a[key], value) << key;
  }
}

TEST(Api, SitesByPidAndStartTime) {
  DaemonSnapshot snap = sample_snapshot("svc");
  int status = 0;
  std::string body = sites_json(snap, 1000, 42, &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(body.find("\"leak_0\""), std::string::npos);
  sites_json(snap, 1000, 43, &status);
  EXPECT_EQ(status, 404);
  sites_json(snap, 999, 0, &status);
  EXPECT_EQ(status, 404);
}

TEST(Profile, OtherSampleKeepsTotals) {
  DaemonSnapshot snap = sample_snapshot("svc");
  PprofInput in = profile_input(snap.processes[0].snapshot, 0);
  uint64_t inuse = 0;
  for (const PprofSite& s : in.sites) inuse += s.inuse_bytes;
  EXPECT_EQ(inuse, snap.processes[0].snapshot.kinds[LW_KIND_HEAP].live_bytes);
  EXPECT_EQ(in.sites.back().frames.at(0).function, "[other sites]");
}

}  // namespace
}  // namespace lw

// The one counter list (bpf/lw_counters.h): every counter is exported in a
// family the exporter knows, and the names are unique.
TEST(Counters, EveryCounterHasAKnownFamily) {
  std::set<std::string> names;
  size_t assigned = 0;
  for (size_t i = 0; i < LW_CNT_MAX; ++i) {
    const lw::CounterInfo* c = lw::counter_info(i);
    if (c == nullptr) continue;
    ++assigned;
    ASSERT_NE(c->name, nullptr);
    EXPECT_NE(lw::counter_family_help(c->family), nullptr)
        << "counter " << c->name << " names family " << c->family
        << ", which exporter/metrics.cc does not export: add it to counter_family_help()";
    EXPECT_TRUE(names.insert(c->name).second) << "duplicate counter name " << c->name;
    EXPECT_STREQ(lw::counter_name(i), c->name);
  }
  EXPECT_EQ(assigned, 44u);
  EXPECT_EQ(lw::counter_info(18), nullptr);  // unassigned slots stay unexported
  EXPECT_EQ(lw::counter_family_help("leakwatch_no_such_family_total"), nullptr);
}

namespace lw {
namespace {

// The worst case at the defaults (docs/metrics.md, "Series cap"): 256
// processes, each with top_sites_per_process sites by live bytes and as
// many more by leak rate, two kinds: every series fits under the default
// cap (the issue: ~82 k series against a 50 k cap, silently cut).
TEST(Metrics, DefaultsFitUnderTheDefaultSeriesCap) {
  const Config config;
  DaemonSnapshot snap = sample_snapshot("svc", static_cast<int>(config.limits.max_processes),
                                        2 * static_cast<int>(config.top_sites_per_process));
  for (ProcessEntry& e : snap.processes) {
    e.snapshot.kinds[LW_KIND_MMAP] = e.snapshot.kinds[LW_KIND_HEAP];
    for (size_t s = 0; s < e.snapshot.sites.size(); s += 2) e.snapshot.sites[s].kind = LW_KIND_MMAP;
  }
  RenderStats stats;
  const MetricsOptions defaults;
  auto hwm = [] {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) / 1024.0;
    return 0.0;
  };
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const double before = hwm();
  std::string text = render_metrics(snap, defaults, &stats);
  printf("[ figures  ] rendering them raised the peak RSS by %.1f MiB\n", hwm() - before);
  printf("[ figures  ] defaults' worst case: %zu series, %zu dropped, %zu bytes of text\n", stats.series,
         stats.series_dropped, text.size());
  EXPECT_EQ(stats.series_dropped, 0u);
  // Every process keeps its top sites and its "other" row: the cap took
  // detail, evenly, and said so.
  for (const ProcessEntry& e : snap.processes) {
    const std::string pid = "pid=\"" + std::to_string(e.process.identity.pid) + "\"";
    EXPECT_NE(text.find("leakwatch_site_live_bytes{" + pid), std::string::npos) << pid;
  }
  EXPECT_EQ(text.find("leakwatch_series_sites_folded 0\n"), std::string::npos);
  EXPECT_EQ(defaults.max_series, Config{}.limits.max_series);
}

// The old name, deprecated in 0.1.0, is gone (issue 35, item 12).
TEST(Metrics, StaleTimestampUnderItsNameOnlyAndStartTimeSeconds) {
  DaemonSnapshot snap = sample_snapshot("svc");
  snap.processes[0].snapshot.heap_stale_since = 1795000000.5;
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_process_heap_stale_since_timestamp_seconds{"), std::string::npos);
  EXPECT_EQ(text.find("leakwatch_process_heap_stale_since_seconds"), std::string::npos) << text;
  EXPECT_NE(text.find("} 1795000000.5"), std::string::npos) << text;
  // start_time stays in ticks (identity), its time is a value.
  EXPECT_NE(text.find("leakwatch_process_start_time_seconds{"), std::string::npos);
  // From the boot time the snapshot carries (read at publish, not here).
  EXPECT_EQ(start_time_unix_seconds(snap, 42), 0);
  snap.self.boot_time = 1.7e9;
  snap.self.ticks_per_second = 100;
  EXPECT_DOUBLE_EQ(start_time_unix_seconds(snap, 42), 1.7e9 + 0.42);
  text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_process_start_time_seconds{pid=\"1000\""), std::string::npos);
  EXPECT_NE(text.find("} 1700000000.42\n"), std::string::npos) << text;
}

// The labels of a sample line ("name{a=\"x\",b=\"y\"} value"), plain
// values only (no escaped quotes), and its name.
std::pair<std::string, std::map<std::string, std::string>> sample_labels(const std::string& line) {
  std::map<std::string, std::string> labels;
  const size_t open = line.find('{');
  const std::string name = line.substr(0, std::min(open, line.find(' ')));
  if (open == std::string::npos) return {name, labels};
  size_t i = open + 1;
  while (i < line.size() && line[i] != '}') {
    const size_t eq = line.find("=\"", i);
    const size_t end = line.find('"', eq + 2);
    labels[line.substr(i, eq - i)] = line.substr(eq + 2, end - eq - 2);
    i = end + 1;
    if (line[i] == ',') ++i;
  }
  return {name, labels};
}

// Issue 35, item 12: the identity is on one leakwatch_process_info series
// per process; every other per-process and per-site series carries only
// the pid and start_time key.
TEST(Metrics, IdentityOnlyOnTheProcessInfoSeries) {
  DaemonSnapshot snap = sample_snapshot("svc", 3);
  ProcessIdentity& id = snap.processes[1].process.identity;
  id.unit = "web.service";
  id.pod_uid = "u-1";
  id.container_id = "containerd://abc";
  id.pod_namespace = "prod";
  id.pod_name = "web-0";
  const std::string text = render_metrics(snap, {});
  const std::set<std::string> identity = {"comm", "exe", "target", "unit", "uid", "container_id", "namespace", "pod"};
  std::map<std::string, std::map<std::string, std::string>> info;  // by pid
  size_t keyed = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto [name, labels] = sample_labels(line);
    if (name == "leakwatch_process_info") {
      EXPECT_TRUE(info.emplace(labels.at("pid"), labels).second) << "two info series for pid " << labels.at("pid");
      continue;
    }
    if (!labels.count("pid")) continue;
    ++keyed;
    EXPECT_TRUE(labels.count("start_time")) << line;
    for (const auto& [label, value] : labels) EXPECT_FALSE(identity.count(label)) << line;
  }
  EXPECT_GT(keyed, 3u * 20);
  ASSERT_EQ(info.size(), 3u) << text;
  const std::map<std::string, std::string> expected = {
      {"pid", "1001"}, {"start_time", "42"}, {"comm", "svc"}, {"exe", "/usr/bin/svc"}, {"target", "t"},
      {"unit", "web.service"}, {"uid", "u-1"}, {"container_id", "containerd://abc"}, {"namespace", "prod"},
      {"pod", "web-0"}};
  EXPECT_EQ(info.at("1001"), expected);
  EXPECT_EQ(info.at("1000").at("pod"), "");
  std::string out;
  EXPECT_TRUE(promtool_accepts(text, &out)) << out;
}

// The series cap cuts whole processes in order, and each process's info
// series comes first: a process with any series exported has its info
// series, so a join never loses a series that made it under the cap.
TEST(Metrics, SeriesCapNeverKeepsFiguresWithoutTheirInfoSeries) {
  const DaemonSnapshot snap = sample_snapshot("svc", 40, 20);
  RenderStats full;
  (void)render_metrics(snap, {}, &full);
  size_t cut_somewhere = 0;
  for (size_t cap = 150; cap < full.series; cap += 97) {
    MetricsOptions opts;
    opts.max_series = cap;
    RenderStats stats;
    const std::string text = render_metrics(snap, opts, &stats);
    if (stats.series_dropped > 0) ++cut_somewhere;
    std::set<std::string> with_info, with_series;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto [name, labels] = sample_labels(line);
      if (!labels.count("pid")) continue;
      (name == "leakwatch_process_info" ? with_info : with_series).insert(labels.at("pid"));
    }
    for (const std::string& pid : with_series) EXPECT_TRUE(with_info.count(pid)) << "cap " << cap << ": pid " << pid;
  }
  EXPECT_GT(cut_somewhere, 0u);
}

TEST(Metrics, HttpFrontFamilies) {
  HttpFrontStats http;
  http.max_connections = 256;
  http.connections_open = 3;
  http.refused["body"] = 2;
  http.connections_closed["cap"] = 7;
  MetricsOptions opts;
  opts.http = &http;
  std::string text = render_metrics(sample_snapshot("svc"), opts);
  EXPECT_NE(text.find("leakwatch_http_connections 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("leakwatch_http_requests_refused_total{reason=\"body\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_http_connections_closed_total{reason=\"cap\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("leakwatch_web_config_last_reload_successful 1\n"), std::string::npos);
  std::string output;
  EXPECT_TRUE(promtool_accepts(text, &output)) << output;
}

// RSS explained (decision rss-explained): one series per part, only where the
// breakdown was read.
TEST(Metrics, RssBytesByPart) {
  DaemonSnapshot snap = sample_snapshot("svc", 2);
  RssBreakdown& r = snap.processes[0].snapshot.rss;
  r.valid = true;
  r.live_heap = 1000;
  r.held_or_retained = 200;
  r.untracked = 30;
  r.file_rss = 4096;
  std::string text = render_metrics(snap, {});
  EXPECT_NE(text.find("leakwatch_process_rss_bytes{pid=\"1000\""), std::string::npos) << text;
  EXPECT_NE(text.find("part=\"held_before_attach_or_retained\"} 200\n"), std::string::npos) << text;
  EXPECT_NE(text.find("part=\"file\"} 4096\n"), std::string::npos) << text;
  EXPECT_NE(text.find("part=\"stacks\"} 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("leakwatch_process_rss_bytes{pid=\"1001\""), std::string::npos) << text;
}

}  // namespace
}  // namespace lw
