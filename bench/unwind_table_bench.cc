// SPDX-License-Identifier: Apache-2.0
// Unwind-table figures (bench/README.md, "Unwind tables"): for each object,
// how many FDEs and rows its CFI compiles to, the bytes the BPF maps would
// hold (rows * 12 + pages * 4), the build time, and the peak RSS the build
// adds (VmHWM, reset through /proc/self/clear_refs before each object).
// Times are the best of --repeat builds, the section read included; the
// page cache is warm after the first.
//
//   lw_bench_unwind OBJECT...        one line per object, then the total
//   lw_bench_unwind --pid PID        every executable file PID maps
//   options: --repeat N (best build time of N, default 3), --cache (also
//            time serialize + parse_cached_table)
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/symbols/elf_file.h"
#include "core/proc/proc_maps.h"
#include "core/unwind/unwind_cache.h"
#include "core/unwind/unwind_table.h"

namespace {

long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::atol(line.c_str() + n + 1);
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak_rss() {
  FILE* f = fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

// CPU time of this thread: on a loaded machine it moves far less than the
// wall-clock build time (both are printed).
double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct Totals {
  uint64_t fdes = 0, rows = 0, bytes = 0;
  double ms = 0, cpu_ms = 0;
  long peak_kib = 0;
  int objects = 0, failed = 0;
};

void measure(const std::string& path, int repeat, bool cache, Totals& totals) {
  auto elf = lw::ElfFile::open_path(path);
  if (!elf) {
    printf("%-60s  open failed: %s\n", path.c_str(), elf.error().message.c_str());
    ++totals.failed;
    return;
  }
  double best_ms = 1e300, best_cpu_ms = 1e300;
  long peak_kib = 0;
  lw::UnwindTable kept;
  for (int i = 0; i < repeat; ++i) {
    const bool reset = reset_peak_rss();
    const long before = status_kib("VmRSS");
    const double cpu0 = thread_cpu_ms();
    auto table = lw::build_unwind_table(**elf, nullptr);
    const double cpu = thread_cpu_ms() - cpu0;
    const long peak = status_kib("VmHWM");
    if (!table) {
      printf("%-60s  build failed: %s\n", path.c_str(), table.error().message.c_str());
      ++totals.failed;
      return;
    }
    best_ms = std::min(best_ms, table->stats.build_ms);
    best_cpu_ms = std::min(best_cpu_ms, cpu);
    if (reset && before >= 0 && peak >= before) peak_kib = std::max(peak_kib, peak - before);
    kept = std::move(*table);
  }
  const lw::UnwindTableStats& s = kept.stats;
  printf("%-60s %8lu %9zu %11zu %9.1f %9.1f %9.1f", path.c_str(), (unsigned long)s.cfi.fdes,
         kept.rows.size(), kept.bytes(), best_ms, best_cpu_ms, peak_kib / 1024.0);
  printf(
      "   rsp %lu rbp %lu plt %lu deref %lu sig %lu end %lu unsup %lu none %lu, before merge %lu",
      (unsigned long)s.rows_by_cfa_type[LW_CFA_RSP], (unsigned long)s.rows_by_cfa_type[LW_CFA_RBP],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_PLT],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_DEREF_RBP],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_SIGNAL],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_END],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_UNSUPPORTED],
      (unsigned long)s.rows_by_cfa_type[LW_CFA_NONE], (unsigned long)s.rows_before_merge);
  // What the default UnwindBuildLimits must leave room for.
  printf(", largest program %lu B, remember depth %u, steps %lu, refused %lu, malformed %lu",
         (unsigned long)s.cfi.max_program_bytes, s.cfi.max_remember_depth,
         (unsigned long)s.cfi.steps, (unsigned long)s.cfi.records_refused,
         (unsigned long)s.cfi.fdes_malformed);
  if (cache) {
    // The cache key the daemon uses (decision file-identity): the
    // build-id and the hash of what the table is built from.
    auto input = lw::read_cfi_input(**elf, nullptr);
    const std::string identity = input ? lw::cfi_identity(*input) : "";
    const auto t0 = std::chrono::steady_clock::now();
    const std::string bytes = lw::serialize(kept, (*elf)->build_id(), identity);
    const auto t1 = std::chrono::steady_clock::now();
    auto back = lw::parse_cached_table(bytes, (*elf)->build_id(), identity);
    const auto t2 = std::chrono::steady_clock::now();
    printf(", cache %zu bytes: write %.1f ms, read %.1f ms%s", bytes.size(),
           std::chrono::duration<double, std::milli>(t1 - t0).count(),
           std::chrono::duration<double, std::milli>(t2 - t1).count(), back ? "" : " (REFUSED)");
  }
  printf("\n");
  totals.fdes += s.cfi.fdes;
  totals.rows += kept.rows.size();
  totals.bytes += kept.bytes();
  totals.ms += best_ms;
  totals.cpu_ms += best_cpu_ms;
  totals.peak_kib = std::max(totals.peak_kib, peak_kib);
  ++totals.objects;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  int repeat = 3;
  bool cache = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, atoi(argv[++i]));
    } else if (arg == "--cache") {
      cache = true;
    } else if (arg == "--pid" && i + 1 < argc) {
      const pid_t pid = static_cast<pid_t>(atoi(argv[++i]));
      auto maps = lw::read_proc_maps(pid);
      if (!maps) {
        fprintf(stderr, "%s\n", maps.error().message.c_str());
        return 1;
      }
      std::set<std::string> seen;
      for (const lw::MapEntry& e : maps->entries) {
        if (!e.executable || !e.is_file() || e.deleted) continue;
        if (seen.insert(e.path).second) paths.push_back(e.path);
      }
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) {
    fprintf(stderr, "usage: %s [--repeat N] [--cache] (OBJECT... | --pid PID)\n", argv[0]);
    return 2;
  }
  printf("%-60s %8s %9s %11s %9s %9s %9s\n", "object", "FDEs", "rows", "bytes", "build_ms",
         "cpu_ms", "peak_MiB");
  Totals totals;
  for (const std::string& p : paths) measure(p, repeat, cache, totals);
  printf("%-60s %8lu %9lu %11lu %9.1f %9.1f %9.1f   (%d objects, %d failed; peak: the largest)\n",
         "TOTAL", (unsigned long)totals.fdes, (unsigned long)totals.rows,
         (unsigned long)totals.bytes, totals.ms, totals.cpu_ms, totals.peak_kib / 1024.0,
         totals.objects, totals.failed);
  return totals.failed == 0 ? 0 : 1;
}
