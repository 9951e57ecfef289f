// SPDX-License-Identifier: Apache-2.0
// `leakwatch snapshot -p PID [--duration SECONDS] -o FILE.pb.gz`: attach,
// trace for a while, and write a pprof heap profile, without a daemon.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/exit_codes.h"
#include "cli/run.h"
#include "core/fd.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "exporter/profile.h"

namespace lw {

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }
}  // namespace

int run_snapshot(int argc, char** argv) {
  pid_t pid = 0;
  double duration = 10;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "-p" || a == "--pid") && i + 1 < argc) {
      char* end = nullptr;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v <= 0) {
        fprintf(stderr, "leakwatch snapshot: invalid pid '%s'\n", argv[i]);
        return exit_code::kUsage;
      }
      pid = static_cast<pid_t>(v);
    } else if ((a == "-d" || a == "--duration") && i + 1 < argc) {
      char* end = nullptr;
      duration = strtod(argv[++i], &end);
      if (*end || !(duration >= 0 && duration <= 86400)) {
        fprintf(stderr, "leakwatch snapshot: --duration must be between 0 and 86400 seconds\n");
        return exit_code::kUsage;
      }
    } else if ((a == "-o" || a == "--output") && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "-h" || a == "--help") {
      printf("usage: leakwatch snapshot -p PID [--duration SECONDS] -o FILE.pb.gz\n"
             "Attaches to PID, traces for SECONDS (default 10), and writes a gzipped pprof\n"
             "heap profile of the memory allocated since attach and still live.\n");
      return exit_code::kOk;
    } else {
      fprintf(stderr, "leakwatch snapshot: unknown option '%s'\n", a.c_str());
      return exit_code::kUsage;
    }
  }
  if (pid == 0 || out.empty()) {
    fprintf(stderr, "usage: leakwatch snapshot -p PID [--duration SECONDS] -o FILE.pb.gz\n");
    return exit_code::kUsage;
  }
  auto tracer = Tracer::create(BpfOptions{}, default_unwind_options());
  if (!tracer) {
    fprintf(stderr, "leakwatch: %s\n", tracer.error().message.c_str());
    return exit_code_for(tracer.error());
  }
  if (Status st = (*tracer)->attach(pid); !st) {
    fprintf(stderr, "leakwatch: attaching to %d: %s\n", pid, st.error().message.c_str());
    return exit_code_for(st.error());
  }
  // Said once every probe is in place (and the unwind tables of what the
  // process maps are loaded, bounded wait), so a caller knows from when
  // the profile covers the process.
  if (UnwindTables* u = (*tracer)->unwind_tables()) (void)u->wait_idle(std::chrono::seconds(30));
  fprintf(stderr, "leakwatch snapshot: attached to %d, tracing for %g s\n", pid, duration);
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  raise_fd_limit();  // best effort: a snapshot of one process needs few fds
  Tracer& t = **tracer;
  const double started = std::chrono::duration<double>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(duration));
  while (!g_stop.load() && !t.process(pid)->exited && std::chrono::steady_clock::now() < deadline) {
    if (Result<int> n = t.poll(100); !n) {
      fprintf(stderr, "leakwatch: %s\n", n.error().message.c_str());
      return exit_code::kError;
    }
  }
  while (true) {
    Result<int> n = t.poll(0);
    if (!n || *n == 0) break;
  }
  TracedProcess& proc = *t.process(pid);
  ProcessSnapshot snap = take_snapshot(t, proc, 100000, false);
  PprofInput in = profile_input(snap, started);
  Result<std::string> gz = encode_pprof_gz(in);
  if (!gz) {
    fprintf(stderr, "leakwatch: %s\n", gz.error().message.c_str());
    return exit_code::kError;
  }
  Result<int> fd = create_output_file(out);
  if (!fd) {
    fprintf(stderr, "leakwatch: writing %s: %s\n", out.c_str(), fd.error().message.c_str());
    return exit_code::kError;
  }
  FILE* f = fdopen(*fd, "wb");
  if (!f) close(*fd);
  if (!f || fwrite(gz->data(), 1, gz->size(), f) != gz->size() || fclose(f) != 0) {
    fprintf(stderr, "leakwatch: writing %s: %s\n", out.c_str(), strerror(errno));
    return exit_code::kError;
  }
  fprintf(stderr, "leakwatch: wrote %s: %zu sites, %llu live bytes\n", out.c_str(),
          snap.sites.size(), static_cast<unsigned long long>(snap.live_bytes));
  return exit_code::kOk;
}

}  // namespace lw
