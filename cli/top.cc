// SPDX-License-Identifier: Apache-2.0
// `leakwatch top`: attach to one running process and print the stacks that
// hold its memory, once per interval, as a table or as JSON lines.
#include "cli/top.h"

#include "core/fd.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "cli/exit_codes.h"
#include "core/analyzer.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "cli/top_printer.h"
#include "lw_sampling.h"

namespace lw {

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

struct TopOptions {
  pid_t pid = 0;
  double interval_s = 1.0;
  long count = -1;  // -1: until the process exits or a signal
  bool json = false;
  size_t max_sites = 20;
  long stall_consumer_ms = 0;
  std::string record_path;  // raw ring-buffer records, for bench/ replay
  uint64_t sample_mean_bytes = 0;  // byte sampling; 0 = every allocation
  bool light = false;              // --mode light: no heap probes
  BpfOptions bpf;
};

void top_usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch top -p PID [options]\n"
          "  -p, --pid PID               process to attach to (it keeps running)\n"
          "  -i, --interval SECONDS      time between snapshots (default 1)\n"
          "  -n, --count N               exit after N snapshots (default: until exit)\n"
          "      --json                  one JSON object per snapshot, one per line\n"
          "  -k, --top K                 sites shown per snapshot (default 20)\n"
          "      --ringbuf-bytes N       ring buffer size, power of two >= 4096 (8 MiB)\n"
          "      --live-max N            kernel live-allocation map entries (262144)\n"
          "      --stack-max N           kernel stack map entries (16384)\n"
          "      --mode full|light       full (default): heap probes and mmap tracing;\n"
          "                              light: only anonymous mmap/munmap/brk tracing\n"
          "      --sample-mean BYTES     sample heap allocations by bytes at this mean\n"
          "                              (1..1073741824; heap figures become estimates)\n"
          "      --no-python-frames      native frames only in CPython processes\n"
          "      --record-events FILE    also write every raw event record to FILE\n"
          "                              (replayed by bench/lw_bench_consumer --replay)\n"
          "      --debug-stall-consumer-ms N\n"
          "                              stop reading events for N ms after attach\n"
          "                              (fault testing: forces ring-buffer loss)\n");
}

bool parse_u64(const char* s, uint64_t& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return false;
  out = v;
  return true;
}

// Returns an exit code on error, or -1 when parsing succeeded.
int parse(int argc, char** argv, TopOptions& o) {
  bool have_pid = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "leakwatch top: %s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    uint64_t n = 0;
    if (a == "-h" || a == "--help") {
      top_usage(stdout);
      return exit_code::kOk;
    } else if (a == "-p" || a == "--pid") {
      const char* v = value("--pid");
      if (!v || !parse_u64(v, n) || n == 0 || n > 4194304) {
        fprintf(stderr, "leakwatch top: invalid pid '%s'\n", v ? v : "");
        return exit_code::kUsage;
      }
      o.pid = static_cast<pid_t>(n);
      have_pid = true;
    } else if (a == "-i" || a == "--interval") {
      const char* v = value("--interval");
      char* end = nullptr;
      double d = v ? strtod(v, &end) : 0;
      if (!v || *end || !(d >= 0.05 && d <= 86400)) {
        fprintf(stderr, "leakwatch top: --interval must be between 0.05 and 86400 seconds\n");
        return exit_code::kUsage;
      }
      o.interval_s = d;
    } else if (a == "-n" || a == "--count") {
      const char* v = value("--count");
      if (!v || !parse_u64(v, n) || n == 0) {
        fprintf(stderr, "leakwatch top: --count must be a positive integer\n");
        return exit_code::kUsage;
      }
      o.count = static_cast<long>(n);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-k" || a == "--top") {
      const char* v = value("--top");
      if (!v || !parse_u64(v, n) || n == 0 || n > 100000) {
        fprintf(stderr, "leakwatch top: --top must be between 1 and 100000\n");
        return exit_code::kUsage;
      }
      o.max_sites = n;
    } else if (a == "--ringbuf-bytes") {
      const char* v = value("--ringbuf-bytes");
      if (!v || !parse_u64(v, n) || n < 4096 || n > (1u << 30) || (n & (n - 1))) {
        fprintf(stderr, "leakwatch top: --ringbuf-bytes must be a power of two in [4096, 1 GiB]\n");
        return exit_code::kUsage;
      }
      o.bpf.ringbuf_bytes = static_cast<uint32_t>(n);
    } else if (a == "--live-max") {
      const char* v = value("--live-max");
      if (!v || !parse_u64(v, n) || n < 16 || n > (1u << 26)) {
        fprintf(stderr, "leakwatch top: --live-max must be between 16 and 67108864\n");
        return exit_code::kUsage;
      }
      o.bpf.live_max_entries = static_cast<uint32_t>(n);
    } else if (a == "--stack-max") {
      const char* v = value("--stack-max");
      if (!v || !parse_u64(v, n) || n < 1 || n > (1u << 22)) {
        fprintf(stderr, "leakwatch top: --stack-max must be between 1 and 4194304\n");
        return exit_code::kUsage;
      }
      o.bpf.stack_max_entries = static_cast<uint32_t>(n);
    } else if (a == "--mode") {
      const char* v = value("--mode");
      if (!v || (strcmp(v, "full") != 0 && strcmp(v, "light") != 0)) {
        fprintf(stderr, "leakwatch top: --mode must be full or light\n");
        return exit_code::kUsage;
      }
      o.light = strcmp(v, "light") == 0;
    } else if (a == "--sample-mean") {
      const char* v = value("--sample-mean");
      if (!v || !parse_u64(v, n) || n < 1 || n > LW_SAMPLE_MAX_MEAN) {
        fprintf(stderr, "leakwatch top: --sample-mean must be between 1 and 1073741824\n");
        return exit_code::kUsage;
      }
      o.sample_mean_bytes = n;
    } else if (a == "--no-python-frames") {
      o.bpf.python_frames = false;
    } else if (a == "--record-events") {
      const char* v = value("--record-events");
      if (!v || !*v) return exit_code::kUsage;
      o.record_path = v;
    } else if (a == "--debug-stall-consumer-ms") {
      const char* v = value("--debug-stall-consumer-ms");
      if (!v || !parse_u64(v, n) || n > 600000) {
        fprintf(stderr, "leakwatch top: --debug-stall-consumer-ms must be <= 600000\n");
        return exit_code::kUsage;
      }
      o.stall_consumer_ms = static_cast<long>(n);
    } else {
      fprintf(stderr, "leakwatch top: unknown option '%s'\n", a.c_str());
      top_usage(stderr);
      return exit_code::kUsage;
    }
  }
  if (!have_pid) {
    fprintf(stderr, "leakwatch top: -p PID is required\n");
    top_usage(stderr);
    return exit_code::kUsage;
  }
  return -1;
}

}  // namespace

int run_top(int argc, char** argv) {
  TopOptions opt;
  if (int rc = parse(argc, argv, opt); rc >= 0) return rc;
  raise_fd_limit();

  if (kill(opt.pid, 0) != 0 && errno == ESRCH) {
    fprintf(stderr, "leakwatch: no such process: %d\n", opt.pid);
    return exit_code::kNoSuchProcess;
  }
  auto tracer = Tracer::create(opt.bpf, default_unwind_options());
  if (!tracer) {
    fprintf(stderr, "leakwatch: %s\n", tracer.error().message.c_str());
    return exit_code_for(tracer.error());
  }
  AttachOptions attach_opts;
  attach_opts.sample_mean_bytes = opt.sample_mean_bytes;
  attach_opts.heap = !opt.light;
  if (Status st = (*tracer)->attach(opt.pid, attach_opts); !st) {
    fprintf(stderr, "leakwatch: attaching to %d: %s\n", opt.pid, st.error().message.c_str());
    return exit_code_for(st.error());
  }
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Tracer& t = **tracer;
  std::unique_ptr<FILE, int (*)(FILE*)> record(nullptr, fclose);
  if (!opt.record_path.empty()) {
    Result<int> fd = create_output_file(opt.record_path);
    if (fd) {
      record.reset(fdopen(*fd, "wb"));
      if (!record) close(*fd);
    }
    if (!record) {
      fprintf(stderr, "leakwatch: --record-events %s: %s\n", opt.record_path.c_str(),
              fd ? strerror(errno) : fd.error().message.c_str());
      return exit_code::kError;
    }
    t.set_record_tap([f = record.get()](const void* data, size_t len) { fwrite(data, 1, len, f); });
  }
  // Leak analysis with the default parameters (docs/analysis.md), sampled
  // at every snapshot; samples closer than its resolution are merged.
  ProcessAnalyzer analyzer;
  const double t0 = std::chrono::duration<double>(
                        std::chrono::steady_clock::now().time_since_epoch()).count();
  auto snapshot = [&](TracedProcess& proc) {
    double now = std::chrono::duration<double>(
                     std::chrono::steady_clock::now().time_since_epoch()).count();
    analyzer.sample(proc.heap, now - t0, monotonic_ns());
    return take_snapshot(t, proc, opt.max_sites, opt.json, &analyzer);
  };
  // The first snapshot is printed once every probe is attached and the
  // unwind tables of what the process maps are loaded (bounded wait): a
  // caller can wait for it before starting the workload.
  if (UnwindTables* u = t.unwind_tables()) (void)u->wait_idle(std::chrono::seconds(30));
  print_snapshot(snapshot(*t.process(opt.pid)), opt.json);
  if (opt.stall_consumer_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.stall_consumer_ms));

  using clock = std::chrono::steady_clock;
  const auto interval = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(opt.interval_s));
  auto next = clock::now() + interval;
  long printed = 0;
  for (;;) {
    TracedProcess* proc = t.process(opt.pid);
    if (proc->exited || g_stop.load()) break;
    auto now = clock::now();
    if (now >= next) {
      print_snapshot(snapshot(*proc), opt.json);
      if (opt.count > 0 && ++printed >= opt.count) return exit_code::kOk;
      next += interval;
      if (next < now) next = now + interval;
      continue;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    Result<int> n = t.poll(static_cast<int>(std::min<long>(wait + 1, 100)));
    if (!n) {
      fprintf(stderr, "leakwatch: %s\n", n.error().message.c_str());
      return exit_code::kError;
    }
  }
  // Exit or signal: apply what is still buffered, then the last word.
  while (true) {
    Result<int> n = t.poll(0);
    if (!n || *n == 0) break;
  }
  print_snapshot(snapshot(*t.process(opt.pid)), opt.json);
  return exit_code::kOk;
}

}  // namespace lw
