// SPDX-License-Identifier: Apache-2.0
// /metrics rendering cost and its effect on event consumption, in one run:
//  1. render a snapshot with ~10,000 series, N times: ms per render (target
//     <= 50 ms);
//  2. consumer throughput (decode + apply of generated events) alone, then
//     with a thread scraping continuously, as in the daemon where the HTTP
//     thread renders from the published snapshot while the consumer runs.
//     The ratio shows whether a scrape stalls consumption.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"
#include "exporter/metrics.h"

namespace {

lw::DaemonSnapshot make_snapshot(size_t processes, size_t sites_per_process) {
  lw::DaemonSnapshot snap;
  snap.timestamp = 1.8e9;
  for (size_t p = 0; p < processes; ++p) {
    lw::ProcessEntry e;
    e.process.identity.pid = static_cast<pid_t>(1000 + p);
    e.process.identity.start_time = 12345 + p;
    e.process.identity.comm = "python3";
    e.process.identity.exe = "/usr/bin/python3.11";
    e.process.identity.unit = "model-server.service";
    e.process.target = "model-server";
    lw::KindTotals& heap = e.snapshot.kinds[LW_KIND_HEAP];
    heap.live_bytes = 1 << 30;
    heap.live_allocations = 100000;
    heap.allocated_bytes = 1ull << 40;
    heap.allocations = 1 << 30;
    for (size_t s = 0; s < sites_per_process; ++s) {
      lw::SiteSnapshot site;
      site.stack_id = 0x9e3779b97f4a7c15ull * (s + 1);
      site.kind = LW_KIND_HEAP;
      site.live_bytes = 1000 * (s + 1);
      site.live_allocations = s + 1;
      site.leak_rate_bytes_per_second = static_cast<double>(s);
      lw::Frame f;
      f.function = "torch::autograd::Engine::evaluate_function_" + std::to_string(s);
      f.file = "/build/torch/csrc/autograd/engine.cpp";
      f.line = static_cast<int>(100 + s);
      site.frames.assign(8, f);
      e.snapshot.sites.push_back(site);
    }
    snap.processes.push_back(std::move(e));
  }
  return snap;
}

double consume(size_t n) {
  lw::HeapTracker tracker;
  lw_event ev{};
  ev.tgid = 1;
  ev.kind = LW_KIND_HEAP;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    // Alternate alloc/free of a rolling window of 4096 blocks.
    uint64_t slot = i / 2 % 4096;
    ev.type = i % 2 == 0 ? LW_EV_ALLOC : LW_EV_FREE;
    ev.addr = 0x7f0000000000ull + slot * 64;
    ev.size = 64;
    ev.alloc_ns = i / 2 + 1;
    ev.stack_hash = slot % 500 + 1;
    auto e = lw::decode_event(&ev, sizeof(ev));
    if (const lw::Event* record = e ? std::get_if<lw::Event>(&*e) : nullptr) tracker.apply(*record);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) / s;
}

}  // namespace

int main() {
  // 50 processes x 20 sites: 20 site rows x 8 series (live, allocs, rate,
  // flag, 4 ages) + process rows: about 10,000 series.
  lw::DaemonSnapshot snap = make_snapshot(50, 24);
  lw::MetricsOptions opts;
  opts.max_series = 100000;
  lw::RenderStats stats;
  std::string text = lw::render_metrics(snap, opts, &stats);
  const int kRenders = 20;
  auto t0 = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (int i = 0; i < kRenders; ++i) bytes += lw::render_metrics(snap, opts).size();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
              kRenders;
  printf("render /metrics      %zu series, %zu bytes: %.1f ms per render (target <= 50 ms)\n",
         stats.series, bytes / kRenders, ms);

  const size_t kEvents = 20'000'000;
  double alone = consume(kEvents);
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!stop.load()) {
      lw::render_metrics(snap, opts);
      scrapes.fetch_add(1);
    }
  });
  double with_scrapes = consume(kEvents);
  stop.store(true);
  scraper.join();
  printf("consumer alone       %.2f M events/s\n", alone / 1e6);
  printf("consumer + scraping  %.2f M events/s (%d scrapes meanwhile)\n", with_scrapes / 1e6,
         scrapes.load());
  printf("ratio                %.2f\n", with_scrapes / alone);
  return ms <= 50 ? 0 : 3;
}
