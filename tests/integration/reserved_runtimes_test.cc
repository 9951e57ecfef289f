// SPDX-License-Identifier: Apache-2.0
// Reserved address space of the runtimes' heaps (decision
// reserved-address-space): Go reserves its heap arenas and the JVM its heap
// PROT_NONE at start-up, before an attach (or, under `top -c`, at an address
// its first commit then takes over: the reservation's record is replaced),
// and commits them by mapping read-write over the reservation. Those
// mappings lie inside address space no record holds; they count the pages
// touched, the rest reserved, as a commit of a tracked reservation does.
// - Go: tests/targets/go/go_heap_grower (cgo, so the runtime's mmap goes
//   through libc), attached with `top -p` after start-up: its heap grows by
//   64 MiB, half of it touched.
// - Java (Debian's openjdk-17-jdk-headless): tests/targets/java/GrowHeap.java
//   under `top -c`, -Xms8m -Xmx2g: its heap grows to four times the 64 MiB it
//   keeps, committed and mostly never touched.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/daemon_harness.h"
#include "tests/integration/harness.h"

namespace lw::itest {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMiB = 1 << 20;
constexpr const char *kJava = "/usr/bin/java";
constexpr const char *kJavac = "/usr/bin/javac";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct MmapFigures {
  int64_t live = 0;
  int64_t reserved = 0;
  int64_t top_site_live = 0;
};
MmapFigures mmap_figures(const Json &snap) {
  MmapFigures f;
  const Json &kinds = snap.at("kinds");
  if (kinds.contains("mmap")) {
    f.live = kinds.at("mmap").at("live_bytes").get<int64_t>();
    f.reserved = kinds.at("mmap").at("reserved_bytes").get<int64_t>();
  }
  for (const Json &site : snap.at("sites"))
    if (site.at("kind") == "mmap") f.top_site_live = std::max(f.top_site_live, site.at("live_bytes").get<int64_t>());
  return f;
}

// The process's resident anonymous memory (RssAnon in /proc/PID/status).
int64_t rss_anon(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  return -1;
}

// What the kernel maps of [start, end): read-write bytes and their
// resident bytes (/proc/PID/smaps).
struct RangeTruth {
  int64_t committed = 0;
  int64_t resident = 0;
};
RangeTruth range_truth(pid_t pid, uint64_t start, uint64_t end) {
  RangeTruth t;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  bool in = false;
  uint64_t from = 0, to = 0;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long a = 0, b = 0;
    char perms[8] = {};
    if (sscanf(line.c_str(), "%llx-%llx %4s", &a, &b, perms) == 3 && line.find(':') > line.find(' ')) {
      from = std::max<uint64_t>(a, start);
      to = std::min<uint64_t>(b, end);
      in = from < to && perms[0] == 'r' && perms[1] == 'w';
      if (in) t.committed += static_cast<int64_t>(to - from);
      continue;
    }
    if (in && line.rfind("Rss:", 0) == 0) t.resident += std::stoll(line.substr(4)) * 1024;
  }
  return t;
}

// The live and reserved bytes of the mmap sites with a frame naming `fn`.
struct SiteFigures {
  int64_t live = 0;
  int64_t reserved = 0;
};
SiteFigures sites_under(const Json &snap, const std::string &fn) {
  SiteFigures f;
  for (const Json &site : snap.at("sites")) {
    if (site.at("kind") != "mmap") continue;
    bool named = false;
    for (const Json &frame : site.at("frames"))
      named = named || frame.at("function").get<std::string>().find(fn) != std::string::npos;
    if (!named) continue;
    f.live += site.at("live_bytes").get<int64_t>();
    f.reserved += site.at("reserved_bytes").get<int64_t>();
  }
  return f;
}

// The Go heap grows by `kept` bytes after the attach, `touched` of them
// touched: the runtime's mappings (sysMap over its first arena, reserved
// before the attach, and over the next, reserved after) count the touched
// pages, within 4 MiB (the runtime's own metadata mapped since), and the
// untouched half is reserved. Before, the first arena's mappings counted
// whole: 64 MiB live.
TEST(ReservedRuntimes, GoHeapGrownAfterAttachCountsTouchedPages) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF)";
  if (access(target_path("go_heap_grower").c_str(), X_OK) != 0)
    GTEST_SKIP() << "go not installed: run scripts/install-deps.sh --with-test-tools";
  TraceOptions o;
  o.target = "go_heap_grower";
  o.settle_after_done_s = 3.0;  // smaps is read at most every 2 s
  TraceSession s(o);
  const int64_t kept = s.truth().at("facts").at("kept").get<int64_t>();
  const int64_t touched = s.truth().at("facts").at("touched").get<int64_t>();
  const int64_t slack = 4 * kMiB;
  Json snap = s.snapshot();
  // Until the figure is in range: a snapshot before the daemon's next smaps
  // read (2 s apart, later on a loaded machine) may count too much or too
  // little.
  const auto in_range = [&](const Json &j) {
    const int64_t live = mmap_figures(j).live;
    return live >= touched - touched / 100 && live <= touched + slack;
  };
  for (const double until = now_s() + 15; !in_range(snap) && now_s() < until;) snap = s.next_snapshot(5s);
  const MmapFigures f = mmap_figures(snap);
  const std::string ctx = describe_sites(snap) + s.diagnostics();
  printf("go heap +%lld MiB, %lld MiB touched: mmap live %lld, reserved %lld, top mmap site %lld\n",
         (long long)(kept / kMiB), (long long)(touched / kMiB), (long long)f.live, (long long)f.reserved,
         (long long)f.top_site_live);
  EXPECT_GE(f.live, touched - touched / 100) << ctx;
  EXPECT_LE(f.live, touched + slack) << ctx;
  EXPECT_LE(f.top_site_live, touched + slack) << ctx;
  EXPECT_GE(f.reserved, (kept - touched) - (kept - touched) / 100) << ctx;
  EXPECT_EQ(snap.at("reserved_bytes").get<int64_t>(), f.reserved) << ctx;
  s.target().write_line("exit");
}

// Runs `argv` to its end: whether it exited 0.
bool run_tool(const std::vector<std::string> &argv, std::string *err) {
  Process p(argv);
  while (p.line_ready(60000ms) && p.read_line(1000ms)) {
  }
  auto status = p.wait_exit(60000ms);
  if (err) *err = p.stderr_text();
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

// The line of leakwatch's stderr (where `top -c` puts the program's
// output) that starts with `prefix`, waiting up to `timeout_s`.
std::string program_line(Process &leakwatch, const std::string &prefix, double timeout_s) {
  for (const double until = now_s() + timeout_s; now_s() < until;) {
    leakwatch.drain();
    const std::string text = leakwatch.stderr_text();
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) break;
      if (text.compare(at, prefix.size(), prefix) == 0) return text.substr(at, end - at);
      at = end + 1;
    }
    usleep(50000);
  }
  return "";
}

// The JVM under `top -c`: its heap reservation (2 GiB) is not live, nor the
// part of it committed and never touched. The process's mmap live bytes are
// at most its resident anonymous memory (RssAnon), no site holds more live
// than the heap has resident, and the heap committed since -Xms is under the
// heap's commits (frames HeapRegionManager::), live or reserved; what of it
// is not resident is reserved. Before, every commit counted whole: 446 MiB
// of mmap live for 126 MiB RssAnon, 335 MiB of it in one site.
TEST(ReservedRuntimes, JvmHeapReservationAndUntouchedCommitsAreNotLive) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF)";
  for (const char *tool : {kJava, kJavac})
    if (access(tool, X_OK) != 0) GTEST_SKIP() << tool << " missing: apt-get install openjdk-17-jdk-headless";
  TempDir tmp;
  const std::string dir = tmp.path();
  std::string err;
  ASSERT_TRUE(run_tool({kJavac, "-d", dir, std::string(LW_SOURCE_DIR) + "/tests/targets/java/GrowHeap.java"}, &err))
      << err;
  const int64_t xms = 8 * kMiB;
  const std::string coops = std::string(dir) + "/coops.log";  // "Heap address: 0x..., size: N MB"
  Process lw({LW_LEAKWATCH_BIN, "top", "--json", "--interval", "0.2", "--", kJava, "-Xms8m", "-Xmx2g",
              "-XX:MinHeapFreeRatio=75", "-XX:MaxHeapFreeRatio=100", "-Xlog:gc+heap+coops=debug:file=" + coops,
              "-cp", dir, "GrowHeap"});
  const std::string ready = program_line(lw, "ready ", 60);
  ASSERT_FALSE(ready.empty()) << lw.stderr_text();
  const pid_t pid = std::stoi(ready.substr(6));
  next_json(lw, 30);
  lw.write_line("go");  // the program's stdin is leakwatch's
  const std::string done = program_line(lw, "done ", 60);
  ASSERT_FALSE(done.empty()) << lw.stderr_text();
  const double done_at = wall_s();
  unsigned long long heap = 0, heap_mb = 0;
  {
    std::ifstream log(coops);
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    const size_t at = text.find("Heap address: ");
    ASSERT_NE(at, std::string::npos) << text;
    ASSERT_EQ(sscanf(text.c_str() + at, "Heap address: %llx, size: %llu MB", &heap, &heap_mb), 2) << text;
  }
  // Settled: a snapshot 3 s after "done" (smaps is read at most every 2 s),
  // and until 12 s after (every mmap record is read again every 10 s), one
  // with the process's mmap live bytes within its resident anonymous memory.
  Json snap;
  MmapFigures all;
  int64_t resident = 0;
  for (;;) {
    snap = next_json(lw, 30);
    const double at = snap.at("timestamp").get<double>();
    if (at < done_at + 3) continue;
    all = mmap_figures(snap);
    resident = rss_anon(pid);
    if (all.live <= resident || at > done_at + 12) break;
  }
  const SiteFigures f = sites_under(snap, "HeapRegionManager::");
  const RangeTruth heap_truth = range_truth(pid, heap, heap + heap_mb * kMiB);
  const std::string ctx = describe_sites(snap) + "\nleakwatch stderr:\n" + lw.stderr_text();
  printf("jvm -Xms8m -Xmx2g: heap committed %lld, resident %lld; sites under HeapRegionManager:: live %lld, "
         "reserved %lld; process mmap live %lld, reserved %lld, top mmap site %lld; RssAnon %lld\n",
         (long long)heap_truth.committed, (long long)heap_truth.resident, (long long)f.live, (long long)f.reserved,
         (long long)all.live, (long long)all.reserved, (long long)all.top_site_live, (long long)resident);
  ASSERT_GT(heap_truth.committed, 4 * xms) << "the heap did not grow: " << done << ctx;
  EXPECT_LE(all.live, resident) << ctx;
  EXPECT_LE(all.top_site_live, heap_truth.resident) << ctx;
  // The heap's commits are all there, live or reserved (with G1's tables
  // committed beside each region, under the same frames).
  EXPECT_GE(f.live + f.reserved, heap_truth.committed - xms) << ctx;
  EXPECT_GE(all.reserved, heap_truth.committed - xms - heap_truth.resident) << ctx;
  EXPECT_EQ(snap.at("reserved_bytes").get<int64_t>(), all.reserved) << ctx;
  lw.write_line("exit");
  std::optional<int> status;
  for (int i = 0; i < 75 && !status; ++i) {
    lw.drain();  // the final snapshot must not block on a full pipe
    status = lw.wait_exit(200ms);
  }
  EXPECT_TRUE(status.has_value()) << ctx;
}

}  // namespace
}  // namespace lw::itest
