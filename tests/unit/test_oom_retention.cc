// SPDX-License-Identifier: Apache-2.0
// Issue 32, item 6: one user's SIGKILLs of their own traced processes must
// not evict the reports of real memory kills, fill oom.report_dir, or make
// /api/v1/oom_kills too big to serve. The retention policy
// (core/policy/oom_retention.h), the per-report size cap
// (view/oom_report.h), the paged API (exporter/http/http_routes.h), and the
// recorder's use of them (service/oom_recorder.h), with `file` null when
// the write failed.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/platform/clock.h"
#include "core/policy/oom_retention.h"
#include "core/proc/process_identity.h"
#include "exporter/http/http_routes.h"
#include "fake_tracer.h"
#include "sleep_child.h"
#include "service/discovery.h"
#include "service/oom_recorder.h"
#include "view/oom_report.h"

namespace lw {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSecondNs = 1'000'000'000ull;

OomReportMeta meta(int ms, OomReportTier tier, std::optional<uint32_t> uid, uint64_t bytes = 1000) {
  char id[40];
  std::snprintf(id, sizeof id, "oom-%013d-1", ms);
  return {id, tier, uid, bytes};
}

std::set<size_t> evicted(const OomRetention& r, const std::vector<OomReportMeta>& kept) {
  std::set<size_t> out;
  for (const OomRetention::Eviction& e : r.evict(kept)) out.insert(e.index);
  return out;
}

TEST(OomRetention, SigkillReportsAreRateLimitedPerUserButNotForRoot) {
  OomRetention r({.sigkill_reports_per_uid_per_minute = 6});
  const uint64_t t0 = 100 * kSecondNs;
  int admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += r.admit_sigkill(1000, t0);
  EXPECT_EQ(admitted, 6) << "a minute's worth at once";
  EXPECT_TRUE(r.admit_sigkill(1001, t0)) << "another user has their own bucket";
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(r.admit_sigkill(0, t0)) << "root is not limited";
  EXPECT_TRUE(r.admit_sigkill(std::nullopt, t0));
  EXPECT_FALSE(r.admit_sigkill(1000, t0 + 5 * kSecondNs));
  EXPECT_TRUE(r.admit_sigkill(1000, t0 + 10 * kSecondNs)) << "one more every 10 s";
  OomRetention unlimited({.sigkill_reports_per_uid_per_minute = 0});
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(unlimited.admit_sigkill(1000, t0));
}

// Whose process it is: the real uid, also for a non-dumpable process (whose
// /proc/PID is root's).
TEST(OomRetention, TheRealUidIsReadFromStatus) {
  EXPECT_EQ(parse_status_real_uid("Name:\tsleep\nUmask:\t0022\nUid:\t65533\t0\t0\t0\nGid:\t0\n"), 65533u);
  EXPECT_EQ(parse_status_real_uid("Name:\tx\nGid:\t0\n"), std::nullopt);
  EXPECT_EQ(parse_status_real_uid("Uid:\tx\n"), std::nullopt);
  Result<ProcessIdentity> self = read_process_identity(getpid(), nullptr);
  ASSERT_TRUE(self);
  EXPECT_EQ(self->real_uid, getuid());
}

TEST(OomRetention, AUsersSigkillReportsPastTheirCapLoseTheOldest) {
  OomRetention r({.max_reports = 100, .max_sigkill_reports_per_uid = 3});
  std::vector<OomReportMeta> kept;  // newest first
  for (int i = 10; i > 0; --i) kept.push_back(meta(i, OomReportTier::kSigkill, 1000));
  kept.push_back(meta(0, OomReportTier::kSigkill, 0));  // root: not capped
  kept.push_back(meta(0, OomReportTier::kSigkill, 2000));
  std::set<size_t> gone = evicted(r, kept);
  EXPECT_EQ(gone, (std::set<size_t>{3, 4, 5, 6, 7, 8, 9})) << "uid 1000 keeps its 3 newest";
  for (const OomRetention::Eviction& e : r.evict(kept)) EXPECT_EQ(e.cause, OomDropCause::kUidCap);
}

// The attack: a full store of memory-kill reports, and a user's kill -9.
TEST(OomRetention, ASigkillReportNeverEvictsAReportForMemory) {
  OomRetention r({.max_reports = 5});
  std::vector<OomReportMeta> kept;
  kept.push_back(meta(100, OomReportTier::kSigkill, 1000));  // the new one
  for (int i = 5; i > 0; --i) kept.push_back(meta(i, OomReportTier::kForMemory, 1000));
  std::vector<OomRetention::Eviction> ev = r.evict(kept);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].index, 0u) << "the sigkill report is dropped, not the oldest OOM kill";
  EXPECT_EQ(ev[0].cause, OomDropCause::kRetention);

  // A report for memory evicts sigkill reports first: the user holding
  // the most loses their oldest, then the oldest for memory.
  kept.clear();
  kept.push_back(meta(100, OomReportTier::kForMemory, 5));           // new
  kept.push_back(meta(90, OomReportTier::kSigkill, 1000));           // 1
  kept.push_back(meta(80, OomReportTier::kSigkill, 2000));           // 2
  kept.push_back(meta(70, OomReportTier::kSigkill, 1000));           // 3: uid 1000's oldest
  kept.push_back(meta(10, OomReportTier::kForMemory, 5));            // 4
  kept.push_back(meta(5, OomReportTier::kSigkill, 2000));            // 5: uid 2000's oldest
  OomRetention four({.max_reports = 4});
  ev = four.evict(kept);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].index, 5u) << "a tie (2 each): the older oldest goes";
  EXPECT_EQ(ev[1].index, 3u);
  OomRetention one({.max_reports = 1});
  EXPECT_EQ(evicted(one, kept), (std::set<size_t>{1, 2, 3, 4, 5}));
}

TEST(OomRetention, TheBytesAreBoundedToo) {
  OomRetention r({.max_reports = 100, .max_total_bytes = 10'000});
  std::vector<OomReportMeta> kept;
  for (int i = 20; i > 0; --i) kept.push_back(meta(i, OomReportTier::kForMemory, 0, 1000));
  std::set<size_t> gone = evicted(r, kept);
  EXPECT_EQ(gone.size(), 10u);
  EXPECT_EQ(*gone.begin(), 10u) << "the oldest ten go";
}

nlohmann::json big_report(size_t sites, size_t frames, size_t name_bytes) {
  OomReport r;
  r.id = "oom-0000000001000-7";
  r.reason = KillReason::kSigkill;
  for (size_t s = 0; s < sites; ++s) {
    SiteSnapshot site;
    site.stack_id = s + 1;
    site.live_bytes = 1000 * (sites - s);
    for (size_t f = 0; f < frames; ++f) {
      Frame fr;
      fr.function = "f" + std::to_string(f) + std::string(name_bytes, 'x');
      site.frames.push_back(fr);
    }
    r.snapshot.sites.push_back(site);
  }
  r.snapshot.sites_total = sites;
  for (int h = 0; h < 60; ++h) r.history.push_back({static_cast<double>(h), 1, {}});
  return to_json(r);
}

TEST(OomReportSize, ABigReportIsCutToItsCapWithAMarker) {
  // 20 sites of 127 frames of 1.6 KB names: about 4 MB, as in issue 32.
  nlohmann::json doc = big_report(20, 127, 1600);
  const size_t before = doc.dump().size();
  ASSERT_GT(before, 4u << 20);
  EXPECT_TRUE(doc.at("truncated").is_null());
  ASSERT_TRUE(cap_report_size(doc, 512u << 10));
  const size_t after = doc.dump().size();
  std::printf("[ figures  ] a %zu-byte report cut to %zu bytes (cap %u): %s\n", before, after, 512u << 10,
              doc.at("truncated").dump().c_str());
  EXPECT_LE(after, 512u << 10);
  const nlohmann::json& t = doc.at("truncated");
  EXPECT_EQ(t.at("sites_dropped").get<size_t>() + doc.at("sites").size(), 20u) << "every dropped site counted";
  EXPECT_EQ(t.at("bytes_before"), before);
  EXPECT_EQ(t.at("max_report_bytes"), 512u << 10);
  EXPECT_EQ(doc.at("sites").at(0).at("stack_id"), "0000000000000001") << "the top site stays";
  EXPECT_EQ(doc.at("history").size(), 60u) << "history is cut only when one site is still too much";

  // One site over the cap alone: its outermost frames go, the leaf stays.
  nlohmann::json one = big_report(1, 127, 8000);
  ASSERT_TRUE(cap_report_size(one, 256u << 10));
  EXPECT_LE(one.dump().size(), 256u << 10);
  const nlohmann::json& frames = one.at("sites").at(0).at("frames");
  EXPECT_EQ(frames.at(0).at("function").get<std::string>().substr(0, 3), "f0x");
  EXPECT_EQ(frames.size() + one.at("truncated").at("frames_dropped").get<size_t>(), 127u);
  EXPECT_EQ(one.at("sites").at(0).at("frames_truncated"), one.at("truncated").at("frames_dropped"));

  nlohmann::json small = big_report(2, 3, 10);
  EXPECT_FALSE(cap_report_size(small, 64u << 10));
  EXPECT_TRUE(small.at("truncated").is_null());
}

DaemonSnapshot snapshot_with_reports(size_t n, size_t bytes_each) {
  DaemonSnapshot snap;
  auto reports = std::make_shared<std::vector<StoredOomReport>>();
  for (size_t i = n; i > 0; --i) {  // newest first
    StoredOomReport r;
    r.meta = meta(static_cast<int>(i), OomReportTier::kForMemory, 0);
    r.json = nlohmann::json({{"id", r.meta.id}, {"pad", std::string(bytes_each, 'p')}}).dump();
    reports->push_back(std::move(r));
  }
  snap.oom_reports = reports;
  return snap;
}

HttpResponse get(const DaemonSnapshot& snap, const std::string& query) {
  HttpRequest req;
  req.method = "GET";
  req.path = "/api/v1/oom_kills";
  std::string q = query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string kv = q.substr(0, amp);
    req.query.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
    q = amp == std::string::npos ? "" : q.substr(amp + 1);
  }
  return route_request(req, &snap, RouteOptions{});
}

// 100 reports of 400 KB: 40 MB in one answer used to be a 503 (the front
// holds 16 MiB for all clients). Pages of at most 4 MiB, and following
// `next` visits every report once, newest first.
TEST(OomKillsApi, IsPagedAndNeverTooBigToServe) {
  const DaemonSnapshot snap = snapshot_with_reports(100, 400'000);
  std::vector<std::string> seen;
  std::string after;
  size_t pages = 0, biggest = 0;
  for (;;) {
    HttpResponse r = get(snap, after.empty() ? "" : "after=" + after);
    ASSERT_EQ(r.status, 200) << r.body.substr(0, 200);
    biggest = std::max(biggest, r.body.size());
    EXPECT_LE(r.body.size(), (4u << 20) + 400'100u);
    nlohmann::json doc = nlohmann::json::parse(r.body);
    EXPECT_EQ(doc.at("total"), 100);
    for (const nlohmann::json& k : doc.at("oom_kills")) seen.push_back(k.at("id"));
    ++pages;
    if (doc.at("next").is_null()) break;
    after = doc.at("next");
    ASSERT_LT(pages, 100u);
  }
  std::printf("[ figures  ] 100 reports of 400 KB: %zu pages, the biggest %zu bytes\n", pages, biggest);
  ASSERT_EQ(seen.size(), 100u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], meta(static_cast<int>(100 - i), {}, 0).id);

  // limit, and a cursor that is no longer kept.
  nlohmann::json doc = nlohmann::json::parse(get(snap, "limit=3&after=oom-0000000000050-9").body);
  ASSERT_EQ(doc.at("oom_kills").size(), 3u);
  EXPECT_EQ(doc.at("oom_kills").at(0).at("id"), meta(50, {}, 0).id);
  EXPECT_EQ(doc.at("next"), meta(48, {}, 0).id);
  EXPECT_EQ(get(snap, "limit=0").status, 400);
  EXPECT_EQ(get(snap, "limit=1001").status, 400);
  EXPECT_EQ(get(snap, "limit=x").status, 400);
  EXPECT_EQ(get(snap, "after=../../etc").status, 400);
  doc = nlohmann::json::parse(oom_kills_json(snapshot_with_reports(0, 0)));
  EXPECT_TRUE(doc.at("oom_kills").empty());
  EXPECT_TRUE(doc.at("next").is_null());
}

// The recorder on the fake tracer, with real children (sleep_child.h).
Config config_for(const std::string& dir) {
  std::vector<ConfigError> errors;
  Result<Config> c = parse_config("targets:\n  - name: sleepers\n    match: {comm: \"^sleep$\"}\n    mode: full\n"
                                  "oom:\n  report_dir: " + dir + "\n  max_reports: 5\n",
                                  "test.yaml", &errors);
  EXPECT_TRUE(c) << (errors.empty() ? "" : format_error(errors[0]));
  return c ? std::move(*c) : Config{};
}

struct Recorder {
  explicit Recorder(const std::string& dir) : state{config_for(dir), ""} {}
  DaemonState state;
  FakeTracer tracer;
  ProcessDiscovery discovery{state, tracer, PodDirectoryOptions{}};
  OomRecorder oom{state, tracer};
  void kill_event(pid_t pid, bool sigkill) {
    ProcessKill k;
    k.pid = pid;
    k.sigkill = sigkill;
    k.memcg = !sigkill;
    k.sender_pid = 42;
    k.sender_comm = "kill";
    k.event_ns = monotonic_ns();
    tracer.kills.push_back(k);
    oom.handle_kills();
  }
};

std::string temp_dir() {
  char tmpl[] = "/tmp/lw-oom-retention-XXXXXX";
  return mkdtemp(tmpl);
}

size_t report_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().starts_with("oom-");
  return n;
}

// A memory-cgroup OOM kill, then one user's 12 kill -9s of their own
// processes: 6 reported (the rate), at most... and the OOM kill's report
// and file stay. Old code: 12 reports, the OOM kill's evicted (max 5).
TEST(OomRecorderRetention, OneUsersSigkillsDoNotEvictAnOomKill) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run children as another user";
  const std::string dir = temp_dir();
  Recorder p(dir);
  SleepChild victim(0);
  p.discovery.consider(victim.pid, 0);
  ASSERT_EQ(p.state.tracked.count(victim.pid), 1u);
  p.kill_event(victim.pid, false);
  ASSERT_EQ(p.state.oom_reports->size(), 1u);
  const std::string oom_id = p.state.oom_reports->front().meta.id;
  std::vector<std::unique_ptr<SleepChild>> own;
  for (int i = 0; i < 12; ++i) {
    own.push_back(std::make_unique<SleepChild>(65533));
    p.discovery.consider(own.back()->pid, 0);
    ASSERT_EQ(p.state.tracked.count(own.back()->pid), 1u);
    EXPECT_EQ(p.state.tracked.at(own.back()->pid).info.identity.real_uid, 65533u);
    p.kill_event(own.back()->pid, true);
  }
  size_t sigkill_reports = 0;
  bool oom_kept = false;
  for (const StoredOomReport& r : *p.state.oom_reports) {
    nlohmann::json j = nlohmann::json::parse(r.json);
    sigkill_reports += j.at("reason") == "sigkill";
    oom_kept |= r.meta.id == oom_id;
    if (j.at("reason") == "sigkill") {
      EXPECT_EQ(j.at("process").at("real_uid"), 65533);
    }
  }
  EXPECT_TRUE(oom_kept) << "the OOM kill's report was evicted by a user's kill -9s";
  EXPECT_EQ(sigkill_reports, 4u) << "max_reports 5, one of them the OOM kill";
  EXPECT_EQ(p.state.counters.sigkills.at("sleepers"), 12u) << "every kill is still counted";
  EXPECT_EQ(p.state.counters.oom_reports_dropped[static_cast<size_t>(OomDropCause::kRateLimited)], 6u);
  EXPECT_EQ(p.state.counters.oom_reports_dropped[static_cast<size_t>(OomDropCause::kRetention)], 2u);
  EXPECT_EQ(report_files(dir), p.state.oom_reports->size()) << "the directory holds the reports kept";
  fs::remove_all(dir);
}

// The write fails (here: the directory cannot be created; in the
// integration test, a full tmpfs): the report is served with `file` null
// and why, never naming a file that is not there.
TEST(OomRecorderRetention, AFailedWriteIsFileNullWithTheError) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/plain") << "a file, not a directory";
  Recorder p(dir + "/plain/oom");
  SleepChild victim(0);
  p.discovery.consider(victim.pid, 0);
  ASSERT_EQ(p.state.tracked.count(victim.pid), 1u);
  p.kill_event(victim.pid, false);
  ASSERT_EQ(p.state.oom_reports->size(), 1u);
  nlohmann::json j = nlohmann::json::parse(p.state.oom_reports->front().json);
  EXPECT_TRUE(j.at("file").is_null()) << j.at("file");
  EXPECT_NE(j.at("file_error").get<std::string>().find("Not a directory"), std::string::npos) << j.at("file_error");
  EXPECT_EQ(p.state.counters.oom_report_write_failures, 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lw
