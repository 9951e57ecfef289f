// SPDX-License-Identifier: Apache-2.0
// The coverage of recorded allocations, and what was not recorded by kind
// (decision unrecorded-per-kind).
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <string>

#include "exporter/metrics.h"
#include "view/json.h"
#include "view/oom_report.h"
#include "view/process_view.h"

namespace lw {
namespace {

TEST(UnrecordedCoverage, NothingSeenIsFullCoverage) {
  EXPECT_EQ(unrecorded_coverage(0, {}), 1.0);
}

TEST(UnrecordedCoverage, NothingLostIsFullCoverage) {
  EXPECT_EQ(unrecorded_coverage(1000, {}), 1.0);
}

TEST(UnrecordedCoverage, MapFullLowersIt) {
  Unrecorded u;
  u.map_full = 3;
  EXPECT_DOUBLE_EQ(unrecorded_coverage(1, u), 0.25);
  EXPECT_EQ(unrecorded_coverage(0, u), 0.0);
  EXPECT_TRUE(u.any());
}

// A stack-map-full allocation is recorded (under an unknown stack): not lost.
TEST(UnrecordedCoverage, StackMapFullIsNotLost) {
  Unrecorded u;
  u.stack_map_full = 50;
  EXPECT_EQ(unrecorded_coverage(100, u), 1.0);
  EXPECT_TRUE(u.any());
}

// Fair shares (decision fair-shares): over_share is lost as map_full is;
// stack_over_share is recorded, under an unknown stack.
TEST(UnrecordedCoverage, OverShareIsLostStackOverShareIsNot) {
  Unrecorded u;
  u.add(LW_KIND_MMAP, {0, 0, 0, 3, 12288, 0});
  EXPECT_DOUBLE_EQ(unrecorded_coverage(1, u), 0.25);
  EXPECT_TRUE(u.kind_incomplete(LW_KIND_MMAP));
  EXPECT_EQ(u.over_share_bytes, 12288u);
  Unrecorded s;
  s.add(LW_KIND_HEAP, {0, 0, 0, 0, 0, 50});
  EXPECT_EQ(unrecorded_coverage(100, s), 1.0);
  EXPECT_TRUE(s.any());
  EXPECT_FALSE(s.kind_incomplete(LW_KIND_HEAP));
  EXPECT_TRUE(s.site_incomplete(LW_KIND_HEAP));
}

// JSON and metrics of a process over its share: both reasons, whose share,
// and the bytes; a process within its share has no over_share series.
TEST(UnrecordedByKind, OverShareInJsonAndMetrics) {
  ProcessSnapshot snap;
  snap.pid = 9;
  snap.unrecorded.add(LW_KIND_MMAP, {0, 0, 0, 4, 16384, 2});
  snap.over_share = "user";
  const nlohmann::json u = to_json(snap).at("unrecorded");
  EXPECT_EQ(u.at("allocations").at("over_share"), 4);
  EXPECT_EQ(u.at("allocations").at("stack_over_share"), 2);
  EXPECT_EQ(u.at("bytes").at("over_share"), 16384);
  EXPECT_TRUE(u.at("verdicts_incomplete").get<bool>());
  EXPECT_EQ(u.at("fair_share").at("live_map"), "user");
  EXPECT_TRUE(u.at("fair_share").at("stack_map").is_null());
  EXPECT_EQ(u.at("kinds").at("mmap").at("allocations").at("over_share"), 4);
  DaemonSnapshot d;
  ProcessEntry e;
  e.process.identity.pid = 9;
  e.process.identity.comm = "filler";
  e.snapshot = snap;
  d.processes.push_back(e);
  e.process.identity.pid = 10;
  e.snapshot = ProcessSnapshot{};
  d.processes.push_back(e);
  const std::string text = render_metrics(d, {});
  EXPECT_NE(text.find("kind=\"mmap\",reason=\"over_share\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kind=\"mmap\",reason=\"over_share\"} 16384\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kind=\"mmap\",reason=\"stack_over_share\"} 2\n"), std::string::npos) << text;
  // The process within its share has no over_share series.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    EXPECT_FALSE(line.find("pid=\"10\"") != std::string::npos && line.find("over_share") != std::string::npos)
        << line;
}

// Per kind (decision unrecorded-per-kind): add() keeps each kind's counts and
// the totals in step; a kind's process verdict is incomplete on map_full only,
// its site verdicts on either reason.
TEST(UnrecordedByKind, AddKeepsKindsAndTotals) {
  Unrecorded u;
  u.add(LW_KIND_HEAP, {10, 640, 0});
  u.add(LW_KIND_CUDA_DEVICE, {2, 1 << 20, 0});
  u.add(LW_KIND_MMAP, {0, 0, 5});
  u.add(LW_KIND_MAX, {7, 7, 7});  // out of range: ignored
  EXPECT_EQ(u.map_full, 12u);
  EXPECT_EQ(u.map_full_bytes, 640u + (1 << 20));
  EXPECT_EQ(u.stack_map_full, 5u);
  EXPECT_EQ(u.kinds[LW_KIND_CUDA_DEVICE].map_full_bytes, 1u << 20);
  EXPECT_TRUE(u.kind_incomplete(LW_KIND_HEAP));
  EXPECT_TRUE(u.kind_incomplete(LW_KIND_CUDA_DEVICE));
  EXPECT_FALSE(u.kind_incomplete(LW_KIND_MMAP));
  EXPECT_TRUE(u.site_incomplete(LW_KIND_MMAP));
  EXPECT_FALSE(u.site_incomplete(LW_KIND_CUDA_HOST));
  EXPECT_FALSE(u.kind_incomplete(LW_KIND_MAX));
}

ProcessSnapshot lossy_snapshot() {
  ProcessSnapshot snap;
  snap.pid = 7;
  snap.unrecorded.add(LW_KIND_CUDA_DEVICE, {3, 3 << 20, 0});
  snap.kinds[LW_KIND_HEAP].allocations = 100;
  snap.kinds[LW_KIND_CUDA_DEVICE].allocations = 1;
  for (uint32_t kind : {LW_KIND_HEAP, LW_KIND_CUDA_DEVICE}) {
    SiteSnapshot site;
    site.kind = kind;
    site.stack_id = 0x100 + kind;
    site.live_bytes = 4096;
    site.live_allocations = 1;
    site.trend = Trend::kGrowing;
    snap.sites.push_back(site);
  }
  return snap;
}

// JSON: only the kinds that lost something, each with its own flag; each
// site's verdict says whether its kind lost anything.
TEST(UnrecordedByKind, JsonPerKindAndPerSite) {
  const ProcessSnapshot snap = lossy_snapshot();
  const nlohmann::json j = to_json(snap);
  const nlohmann::json& u = j.at("unrecorded");
  EXPECT_TRUE(u.at("verdicts_incomplete").get<bool>());
  ASSERT_EQ(u.at("kinds").size(), 1u) << u.dump();
  const nlohmann::json& dev = u.at("kinds").at("cuda_device");
  EXPECT_EQ(dev.at("allocations").at("map_full"), 3);
  EXPECT_EQ(dev.at("bytes").at("map_full"), 3 << 20);
  EXPECT_TRUE(dev.at("verdicts_incomplete").get<bool>());
  ASSERT_EQ(j.at("sites").size(), 2u);
  EXPECT_FALSE(j.at("sites")[0].at("incomplete").get<bool>()) << j.at("sites")[0].dump();  // heap
  EXPECT_TRUE(j.at("sites")[1].at("incomplete").get<bool>()) << j.at("sites")[1].dump();   // cuda_device
  EXPECT_TRUE(to_json(ProcessSnapshot{}).at("unrecorded").at("kinds").empty());
}

// The OOM report's per-kind process verdicts carry the same flag.
TEST(UnrecordedByKind, OomReportVerdicts) {
  OomReport r;
  r.snapshot = lossy_snapshot();
  const nlohmann::json v = to_json(r).at("verdicts");
  EXPECT_FALSE(v.at("heap").at("incomplete").get<bool>()) << v.dump();
  EXPECT_TRUE(v.at("cuda_device").at("incomplete").get<bool>()) << v.dump();
}

// Metrics: a kind label on both families; the host kinds always, a CUDA
// kind once it made or lost an allocation.
TEST(UnrecordedByKind, MetricsHaveAKindLabel) {
  DaemonSnapshot d;
  ProcessEntry e;
  e.process.identity.pid = 7;
  e.process.identity.comm = "gpu";
  e.snapshot = lossy_snapshot();
  d.processes.push_back(e);
  const std::string text = render_metrics(d, {});
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  EXPECT_TRUE(has("kind=\"cuda_device\",reason=\"map_full\"} 3\n")) << text;
  EXPECT_TRUE(has("leakwatch_process_unrecorded_bytes_total{")) << text;
  EXPECT_TRUE(has("kind=\"cuda_device\",reason=\"map_full\"} 3145728\n")) << text;
  EXPECT_TRUE(has("kind=\"heap\",reason=\"map_full\"} 0\n")) << text;
  EXPECT_TRUE(has("kind=\"mmap\",reason=\"stack_map_full\"} 0\n")) << text;
  EXPECT_FALSE(has("kind=\"cuda_host\",reason=")) << text;
}

}  // namespace
}  // namespace lw
