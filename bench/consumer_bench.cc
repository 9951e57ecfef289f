// SPDX-License-Identifier: Apache-2.0
// Daemon consumer throughput: ring-buffer records decoded and applied to the
// heap tracker, on one core, by replaying a recording.
//
// The recording is either a file of raw struct lw_event records (--replay
// FILE, written by `leakwatch top --record-events FILE`) or generated here: a serving-like mix of churn (alloc, then free a
// while later) over 500 stacks and sizes 16 B..64 KiB, with 5% of the blocks
// leaked. Printed with the decode-only rate of the same records in the same
// run as the baseline, and the ratio.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "core/accounting/event.h"
#include "core/accounting/heap_tracker.h"

namespace {

std::vector<lw_event> generate(size_t n) {
  std::mt19937_64 rng(12345);
  std::vector<lw_event> out;
  out.reserve(n);
  struct Live {
    uint64_t addr, size, ns;
  };
  std::deque<Live> live;
  uint64_t next_addr = 0x7f0000000000ULL, ns = 1;
  while (out.size() < n) {
    bool do_free = !live.empty() && (live.size() > 50000 || rng() % 2 == 0);
    lw_event e{};
    e.tgid = 42;
    e.tid = 42;
    e.kind = LW_KIND_HEAP;
    if (do_free) {
      Live l = live.front();
      live.pop_front();
      if (rng() % 20 == 0) continue;  // leaked: never freed
      e.type = LW_EV_FREE;
      e.addr = l.addr;
      e.size = l.size;
      e.alloc_ns = l.ns;
    } else {
      uint64_t size = 16ULL << (rng() % 13);
      e.type = LW_EV_ALLOC;
      e.addr = next_addr;
      next_addr += size + 16;
      e.size = size;
      e.alloc_ns = ns++;
      e.stack_hash = 1 + rng() % 500;
      live.push_back({e.addr, e.size, e.alloc_ns});
    }
    e.ts_ns = ns;
    out.push_back(e);
  }
  return out;
}

std::vector<lw_event> load(const char* path) {
  std::vector<lw_event> out;
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  lw_event e;
  while (fread(&e, sizeof(e), 1, f) == 1) out.push_back(e);
  fclose(f);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 20'000'000;
  const char* replay = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--events") && i + 1 < argc) n = strtoull(argv[++i], nullptr, 10);
    else if (!strcmp(argv[i], "--replay") && i + 1 < argc) replay = argv[++i];
    else {
      fprintf(stderr, "usage: lw_bench_consumer [--events N] [--replay FILE]\n");
      return 2;
    }
  }
  std::vector<lw_event> rec = replay ? load(replay) : generate(n);
  if (rec.empty()) {
    fprintf(stderr, "no events\n");
    return 1;
  }
  // A short recording is replayed in laps (each lap frees what it
  // allocates, so laps compose) until there are enough events to time.
  for (size_t lap = rec.size(); rec.size() < n;) {
    size_t take = std::min(lap, n - rec.size());
    rec.insert(rec.end(), rec.begin(), rec.begin() + static_cast<std::ptrdiff_t>(take));
  }

  // Baseline: decode only.
  auto t0 = std::chrono::steady_clock::now();
  uint64_t sink = 0;
  for (const lw_event& raw : rec) {
    auto e = lw::decode_event(&raw, sizeof(raw));
    const lw::Event* record = e ? std::get_if<lw::Event>(&*e) : nullptr;
    sink += record ? record->size : 0;
  }
  double decode_s = seconds_since(t0);

  lw::HeapTracker tracker;
  t0 = std::chrono::steady_clock::now();
  for (const lw_event& raw : rec) {
    auto e = lw::decode_event(&raw, sizeof(raw));
    if (const lw::Event* record = e ? std::get_if<lw::Event>(&*e) : nullptr) tracker.apply(*record);
  }
  double apply_s = seconds_since(t0);

  double decode_rate = static_cast<double>(rec.size()) / decode_s;
  double apply_rate = static_cast<double>(rec.size()) / apply_s;
  printf("events                 %zu (%s)\n", rec.size(), replay ? replay : "generated");
  printf("decode only            %8.2f M events/s\n", decode_rate / 1e6);
  printf("decode + apply         %8.2f M events/s  (target >= 5.00)\n", apply_rate / 1e6);
  printf("ratio apply/decode     %8.2f\n", apply_rate / decode_rate);
  // Daemon memory per tracked live allocation (target <= 64 B), and the
  // share of one core the apply path takes at 100k events/s (ring-buffer
  // reads and symbolization not included: those are per stack, not event).
  const double per_alloc = static_cast<double>(tracker.memory_bytes()) /
                           static_cast<double>(std::max<uint64_t>(1, tracker.live_allocations_total()));
  printf("tracker memory         %8.1f bytes per live allocation (target <= 64)\n", per_alloc);
  printf("core at 100k events/s  %8.2f %% (decode + apply)\n", 100e3 / apply_rate * 100);
  printf("live at end            %llu allocations, %llu bytes, %zu sites (checksum %llu)\n",
         static_cast<unsigned long long>(tracker.live_allocations_total()),
         static_cast<unsigned long long>(tracker.live_bytes_total()), tracker.sites().size(),
         static_cast<unsigned long long>(sink));
  return apply_rate >= 5e6 ? 0 : 3;
}
