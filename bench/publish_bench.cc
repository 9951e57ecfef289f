// SPDX-License-Identifier: Apache-2.0
// How long one publish (one DaemonSnapshot of every tracked process) takes
// with 10, 100 and 1,000 traced processes, and where the time goes: the
// daemon's own parts (service/: ProcessDiscovery attaches, Publisher
// publishes) on the real engine (service/engine_tracer.h), as root.
//
//   lw_bench_publish [--counts 10,100,1000] [--mode full|light] [--sites K]
//                    [--publishes R]
//
// Children are forked first (before any BPF is loaded), each a copy of this
// program that waits for SIGUSR1, then allocates 4 blocks at each of K call
// sites (distinct stacks) and holds them until killed. They are attached
// through ProcessDiscovery::consider (matched by comm, as the daemon does),
// given the signal, and their events consumed; then R publishes are timed.
// The first publish after new processes symbolizes their stacks (cold);
// the median of the others is the steady cost of every dirty loop and of
// the once-a-second publish (warm).
// decision daemon-in-parts, has figures.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/platform/clock.h"
#include "core/config/config.h"
#include "core/platform/log.h"
#include "service/daemon_state.h"
#include "service/discovery.h"
#include "service/engine_tracer.h"
#include "service/publisher.h"

namespace {

using lw::EngineTracer;
using Clock = std::chrono::steady_clock;

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Distinct call sites: one function per site, each its own stack.
template <int I>
__attribute__((noinline)) void* site_alloc(size_t n) {
  void* p = malloc(n + I);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

using SiteFn = void* (*)(size_t);
template <int... I>
constexpr std::array<SiteFn, sizeof...(I)> make_sites(std::integer_sequence<int, I...>) {
  return {&site_alloc<I>...};
}
constexpr auto kSites = make_sites(std::make_integer_sequence<int, 64>{});

[[noreturn]] void child_main(int sites) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  int sig = 0;
  sigwait(&set, &sig);
  std::vector<void*> held;
  for (int s = 0; s < sites; ++s)
    for (int i = 0; i < 4; ++i) held.push_back(kSites[static_cast<size_t>(s) % kSites.size()](64));
  for (;;) pause();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts = {10, 100, 1000};
  std::string mode = "full";
  int sites = 16;
  int publishes = 11;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--counts" && i + 1 < argc) {
      counts.clear();
      for (char* tok = strtok(argv[++i], ","); tok; tok = strtok(nullptr, ","))
        counts.push_back(strtoul(tok, nullptr, 10));
    } else if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--sites" && i + 1 < argc) {
      sites = std::clamp(atoi(argv[++i]), 1, 64);
    } else if (a == "--publishes" && i + 1 < argc) {
      publishes = std::max(2, atoi(argv[++i]));
    } else {
      fprintf(stderr, "usage: lw_bench_publish [--counts 10,100,1000] [--mode full|light] "
                      "[--sites K] [--publishes R]\n");
      return 2;
    }
  }
  std::sort(counts.begin(), counts.end());
  const size_t max_n = counts.empty() ? 0 : counts.back();
  lw::set_log_level(lw::LogLevel::kWarn);
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  // The children first, before any BPF object or ring buffer exists.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::vector<pid_t> children;
  for (size_t i = 0; i < max_n; ++i) {
    pid_t pid = fork();
    if (pid == 0) child_main(sites);
    if (pid < 0) {
      perror("fork");
      break;
    }
    children.push_back(pid);
  }
  auto kill_children = [&] {
    for (pid_t pid : children) kill(pid, SIGKILL);
    for (pid_t pid : children) waitpid(pid, nullptr, 0);
  };

  const std::string yaml = "targets:\n  - name: bench\n    match: {comm: \"^lw_bench_publis\"}\n"
                           "    mode: " + mode + "\nlimits: {max_processes: " +
                           std::to_string(std::max<size_t>(max_n, 1)) + "}\n";
  std::vector<lw::ConfigError> errors;
  lw::Result<lw::Config> config = lw::parse_config(yaml, "bench", &errors);
  if (!config) {
    fprintf(stderr, "config: %s\n", errors.empty() ? "?" : lw::format_error(errors[0]).c_str());
    kill_children();
    return 1;
  }
  lw::BpfOptions bpf;
  bpf.max_targets = static_cast<uint32_t>(std::max<size_t>(2 * max_n, 64));
  bpf.live_max_entries = 1u << 20;
  auto tracer = EngineTracer::create(bpf);
  if (!tracer) {
    fprintf(stderr, "tracer: %s\n", tracer.error().message.c_str());
    kill_children();
    return 1;
  }
  lw::DaemonState state{std::move(*config), ""};
  lw::ProcessDiscovery discovery(state, **tracer, lw::PodDirectoryOptions{});
  lw::Publisher publisher(state, **tracer);

  printf("mode %s, %d sites x 4 blocks per process, %d publishes per count\n", mode.c_str(), sites,
         publishes);
  printf("wall: cold (first publish, symbolizing), warm (median); the rest CPU ms of this thread\n");
  printf("%9s %9s %8s %8s %9s %10s %14s %8s %11s %6s\n", "processes", "attach_ms", "cold_ms",
         "warm_ms", "warm_cpu", "views_once", "views_per_proc", "free_cpu", "counters_N", "sites");
  size_t attached = 0;
  double attach_ms_total = 0;
  for (size_t n : counts) {
    for (; attached < n && attached < children.size(); ++attached) {
      const pid_t pid = children[attached];
      const auto t0 = Clock::now();
      discovery.consider(pid, 0);
      attach_ms_total += ms_since(t0);
      kill(pid, SIGUSR1);
    }
    // Consume the children's allocations.
    const auto until = Clock::now() + std::chrono::milliseconds(500 + 2 * n);
    while (Clock::now() < until) (void)(*tracer)->poll(50);
    const double t_s = 0;
    for (auto& [pid, analyzer] : state.analyzers)
      if (const lw::HeapTracker* heap = (*tracer)->heap(pid)) analyzer.sample(*heap, t_s, lw::monotonic_ns());
    std::vector<double> warm, warm_cpu;
    double cold = 0;
    for (int r = 0; r < publishes; ++r) {
      const double cpu0 = thread_cpu_ms();
      publisher.publish();
      if (r == 0) {
        cold = publisher.last_timing().total_ms;
        continue;
      }
      warm.push_back(publisher.last_timing().total_ms);
      warm_cpu.push_back(thread_cpu_ms() - cpu0);
    }
    // The parts of a publish, in CPU time of this thread (wall time on a
    // shared machine is mostly waiting for a CPU): the views as publish()
    // built them before decision daemon-in-parts, the engine-wide figures read
    // again for each process, alternating with the views as now (figures read
    // once); freeing a previous snapshot; the kernel counters read N times.
    std::vector<double> per_process, once, release;
    for (int r = 0; r < 5; ++r) {
      double c0 = thread_cpu_ms();
      for (const auto& [pid, tracked] : state.tracked)
        (void)(*tracer)->snapshot(pid, state.config.top_sites_per_process, nullptr,
                                  (*tracer)->counters(), (*tracer)->stats());
      per_process.push_back(thread_cpu_ms() - c0);
      c0 = thread_cpu_ms();
      const lw::Counters c = (*tracer)->counters();
      const lw::TracerStats st = (*tracer)->stats();
      for (const auto& [pid, tracked] : state.tracked)
        (void)(*tracer)->snapshot(pid, state.config.top_sites_per_process, nullptr, c, st);
      once.push_back(thread_cpu_ms() - c0);
      std::shared_ptr<const lw::DaemonSnapshot> held = publisher.latest();
      publisher.publish();  // `held` keeps the previous one alive
      c0 = thread_cpu_ms();
      held.reset();
      release.push_back(thread_cpu_ms() - c0);
    }
    double c0 = thread_cpu_ms();
    for (size_t i = 0; i < state.tracked.size(); ++i) (void)(*tracer)->counters();
    const double counters_ms = thread_cpu_ms() - c0;
    size_t site_count = 0;
    for (const lw::ProcessEntry& e : publisher.latest()->processes) site_count += e.snapshot.sites.size();
    printf("%9zu %9.2f %8.2f %8.2f %9.2f %10.2f %14.2f %8.2f %11.2f %6zu\n", state.tracked.size(),
           attached ? attach_ms_total / static_cast<double>(attached) : 0.0, cold, median(warm),
           median(warm_cpu), median(once), median(per_process), median(release), counters_ms,
           site_count);
    fflush(stdout);
  }
  kill_children();
  return 0;
}
