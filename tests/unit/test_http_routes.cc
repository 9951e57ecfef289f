// SPDX-License-Identifier: Apache-2.0
// What the paths answer (exporter/http/http_routes.h), on hand-built snapshots:
// pprof without pid, its refused parameters, gzip for Prometheus, JSON
// errors, start_time_seconds.
#include "exporter/http/http_routes.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "exporter/profile.h"

namespace lw {
namespace {

DaemonSnapshot two_processes() {
  DaemonSnapshot snap;
  snap.timestamp = 1.8e9;
  for (int p = 0; p < 2; ++p) {
    ProcessEntry e;
    e.process.identity.pid = 4000 + p;
    e.process.identity.start_time = 100 + static_cast<uint64_t>(p);
    e.process.identity.comm = p == 0 ? "python3" : "redis-server";
    if (p == 1) {
      e.process.identity.pod_namespace = "prod";
      e.process.identity.pod_name = "cache-0";
    }
    SiteSnapshot site;
    site.stack_id = 7;
    site.kind = LW_KIND_HEAP;
    site.live_bytes = 1000;
    site.live_allocations = 1;
    site.allocated_bytes = 5000;
    site.allocations = 5;
    Frame f;
    f.function = "leak_here";
    f.module = "/usr/bin/x";
    f.offset = 0x1234;
    site.frames.push_back(f);
    e.snapshot.sites.push_back(site);
    // More allocated than the listed site holds: freed sites, in the rest row.
    e.snapshot.kinds[LW_KIND_HEAP] = {1000, 1, 9000, 9, 8000, 8};
    e.snapshot.mappings.push_back({0x400000, 0x500000, 0, "/usr/bin/x", "abcd"});
    snap.processes.push_back(e);
  }
  return snap;
}

HttpRequest get(const std::string& target, std::vector<std::pair<std::string, std::string>> headers = {}) {
  std::string head = "GET " + target + " HTTP/1.1\r\nHost: x\r\n";
  for (auto& [n, v] : headers) head += n + ": " + v + "\r\n";
  head += "\r\n";
  HttpRequest r;
  EXPECT_EQ(parse_request_head(head, {}, &r).state, HeadParse::State::kComplete);
  return r;
}

std::string gunzip(const std::string& in) {
  z_stream zs = {};
  inflateInit2(&zs, 16 + MAX_WBITS);
  std::string out(64 << 20, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  inflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  inflateEnd(&zs);
  return out;
}

bool has_header(const HttpResponse& r, const std::string& name, const std::string& value) {
  for (auto& [n, v] : r.headers)
    if (n == name && v == value) return true;
  return false;
}

TEST(HttpRoutes, PprofWithoutPidServesEveryProcessLabelled) {
  DaemonSnapshot snap = two_processes();
  HttpResponse r = route_request(get("/debug/pprof/heap"), &snap, {});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/octet-stream");
  const std::string profile = gunzip(r.body);
  for (const char* s : {"pid", "comm", "python3", "redis-server", "namespace", "prod", "pod", "cache-0", "kind"})
    EXPECT_NE(profile.find(s), std::string::npos) << s;
  PprofInput in = profile_input_all(snap);
  // One site and one rest row (freed sites) per process.
  ASSERT_EQ(in.sites.size(), 4u);
  EXPECT_EQ(in.sites[0].num_labels[0], (std::pair<std::string, int64_t>{"pid", 4000}));
  // The rest row has a function and a module, so its location gets a mapping.
  const PprofSite& rest = in.sites[1];
  EXPECT_EQ(rest.frames.at(0).function, "[other sites]");
  EXPECT_EQ(rest.frames.at(0).module, "[other sites]");
  EXPECT_EQ(rest.alloc_bytes, 4000u);
  // Mappings shared by both processes appear once.
  EXPECT_EQ(in.mappings.size(), 1u);
}

TEST(HttpRoutes, PprofRefusesWhatItDoesNotServe) {
  DaemonSnapshot snap = two_processes();
  for (const char* target : {"/debug/pprof/heap?seconds=30", "/debug/pprof/heap?debug=1",
                             "/debug/pprof/heap?pid=abc", "/debug/pprof/heap?start_time=5"}) {
    HttpResponse r = route_request(get(target), &snap, {});
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_TRUE(nlohmann::json::parse(r.body).contains("error")) << r.body;
  }
  EXPECT_EQ(route_request(get("/debug/pprof/heap?debug=0&pid=4001"), &snap, {}).status, 200);
  EXPECT_EQ(route_request(get("/debug/pprof/heap?pid=9"), &snap, {}).status, 404);
  EXPECT_EQ(route_request(get("/debug/pprof/heap?pid=4000&start_time=101"), &snap, {}).status, 404);
}

TEST(HttpRoutes, GzipWhenTheClientTakesIt) {
  DaemonSnapshot snap = two_processes();
  HttpResponse plain = route_request(get("/metrics"), &snap, {});
  HttpResponse zipped = route_request(get("/metrics", {{"Accept-Encoding", "gzip"}}), &snap, {});
  ASSERT_EQ(zipped.status, 200);
  EXPECT_TRUE(has_header(zipped, "Content-Encoding", "gzip"));
  EXPECT_FALSE(has_header(plain, "Content-Encoding", "gzip"));
  EXPECT_LT(zipped.body.size(), plain.body.size() / 3);
  // Same metrics (the self-monitoring values may move between renders).
  EXPECT_NE(gunzip(zipped.body).find("leakwatch_process_live_bytes{"), std::string::npos);
  HttpResponse refused = route_request(get("/metrics", {{"Accept-Encoding", "gzip;q=0, identity"}}), &snap, {});
  EXPECT_FALSE(has_header(refused, "Content-Encoding", "gzip"));
}

TEST(HttpRoutes, ErrorsAreJsonAndStartTimeSecondsIsServed) {
  DaemonSnapshot snap = two_processes();
  for (const char* target : {"/nope", "/api/v1/processes/77/sites", "/api/v1/processes/x/sites", "/metricsx"}) {
    HttpResponse r = route_request(get(target), &snap, {});
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_TRUE(nlohmann::json::parse(r.body).contains("error")) << r.body;
  }
  EXPECT_EQ(route_request(get("/metrics"), nullptr, {}).status, 503);
  auto procs = nlohmann::json::parse(route_request(get("/api/v1/processes"), &snap, {}).body);
  const auto& p = procs.at("processes").at(0);
  EXPECT_EQ(p.at("start_time"), 100);
  EXPECT_EQ(p.at("start_time_seconds").get<double>(), 0);  // no boot time in the snapshot
  snap.self = read_self_stats();  // as the publisher reads it
  procs = nlohmann::json::parse(route_request(get("/api/v1/processes"), &snap, {}).body);
  const auto& q = procs.at("processes").at(0);
  EXPECT_DOUBLE_EQ(q.at("start_time_seconds").get<double>(), start_time_unix_seconds(snap, 100));
  EXPECT_GT(q.at("start_time_seconds").get<double>(), 1e9);
}

}  // namespace
}  // namespace lw
