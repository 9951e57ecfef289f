// SPDX-License-Identifier: Apache-2.0
// `leakwatch snapshot -p PID [--duration SECONDS] -o FILE.pb.gz`: attach,
// trace for a while, and write a pprof heap profile, without a daemon.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/options.h"
#include "cli/run.h"
#include "core/platform/fd.h"
#include "core/platform/log.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "exporter/profile.h"

namespace lw {

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

void snapshot_usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch snapshot -p PID [--duration SECONDS] [--count N] -o FILE.pb.gz\n"
          "Attaches to PID, traces for SECONDS, and writes a gzipped pprof heap profile\n"
          "of the memory allocated since attach and still live (go tool pprof -top FILE).\n"
          "  -p, --pid PID               process to attach to (it keeps running)\n"
          "  -d, --duration SECONDS      how long to trace (0..86400, default 10); with\n"
          "                              --count, the time between profiles\n"
          "  -n, --count N               write N profiles from one attach, each cumulative\n"
          "                              (everything live since attach): two of them diff\n"
          "                              meaningfully (pprof -diff_base); FILE must hold %%n,\n"
          "                              replaced by 1..N (1..10000, default 1)\n"
          "  -o, --output FILE           where to write the profile\n"
          "      --log-level LEVEL       debug|info|warn|error (debug: libbpf's messages too)\n"
          "      --unwind-cache-dir DIR  keep built unwind tables in DIR (absolute path;\n"
          "                              default /var/cache/leakwatch/unwind when run as\n"
          "                              root, else none); --unwind-cache-dir '': none\n"
          "  -h, --help                  this text\n");
}
// What `snapshot`'s command line asks for.
struct SnapshotOptions {
  pid_t pid = 0;
  double duration = 10;  // seconds
  std::string out;       // the profile's path; with count > 1 it holds "%n"
  uint64_t count = 1;    // profiles from one attach (cumulative series)
  std::optional<std::string> unwind_cache_dir;  // --unwind-cache-dir; "": none
};

// The path of profile `n` (1-based): "%n" replaced by n.
std::string series_path(const std::string& pattern, uint64_t n) {
  std::string out = pattern;
  if (size_t at = out.find("%n"); at != std::string::npos) out.replace(at, 2, std::to_string(n));
  return out;
}

// Parses `snapshot`'s options into `o`. Returns the exit code when the
// command ends here (help, usage error), else -1.
int parse_snapshot_options(int argc, char** argv, SnapshotOptions& o) {
  enum { kOptLogLevel = 256, kOptUnwindCacheDir };
  static const struct option kLong[] = {
      {"pid", required_argument, nullptr, 'p'},
      {"duration", required_argument, nullptr, 'd'},
      {"count", required_argument, nullptr, 'n'},
      {"output", required_argument, nullptr, 'o'},
      {"log-level", required_argument, nullptr, kOptLogLevel},
      {"unwind-cache-dir", required_argument, nullptr, kOptUnwindCacheDir},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  auto bad = [](const char* fmt, const char* arg) {
    fprintf(stderr, "leakwatch snapshot: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    snapshot_usage(stderr);
    return exit_code::kUsage;
  };
  reset_getopt();
  int c;
  while ((c = getopt_long(argc, argv, ":p:d:n:o:h", kLong, nullptr)) != -1) {
    uint64_t n = 0;
    switch (c) {
      case 'p':
        if (!parse_u64(optarg, n) || n == 0 || n > 4194304) return bad("invalid pid '%s'", optarg);
        if (o.pid != 0) return bad("%s-p given twice: snapshot traces one process", "");
        o.pid = static_cast<pid_t>(n);
        break;
      case 'd':
        if (!parse_number(optarg, 0, 86400, o.duration))
          return bad("--duration must be between 0 and 86400 seconds (got '%s')", optarg);
        break;
      case 'n':
        if (!parse_u64(optarg, o.count) || o.count < 1 || o.count > 10000)
          return bad("--count must be between 1 and 10000 (got '%s')", optarg);
        break;
      case 'o':
        if (!*optarg) return bad("%s-o needs a file name", "");
        o.out = optarg;
        break;
      case kOptLogLevel: {
        std::optional<LogLevel> level = parse_log_level(optarg);
        if (!level) return bad("--log-level must be debug, info, warn or error (got '%s')", optarg);
        set_log_level(*level);
        break;
      }
      case kOptUnwindCacheDir:
        if (*optarg && *optarg != '/')
          return bad("--unwind-cache-dir must be an absolute path or '' (got '%s')", optarg);
        o.unwind_cache_dir = optarg;
        break;
      case 'h':
        snapshot_usage(stdout);
        return exit_code::kOk;
      default:
        report_bad_option("snapshot", c, argv);
        snapshot_usage(stderr);
        return exit_code::kUsage;
    }
  }
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
  if (o.pid == 0 || o.out.empty()) return bad("%s-p PID and -o FILE are required", "");
  if (o.count > 1 && o.out.find("%n") == std::string::npos)
    return bad("--count needs %%n in -o's file name, for the profile's number (got '%s')", o.out.c_str());
  return -1;
}

// Consumes events until the duration is over, the process exits or a signal
// comes, then drains what is left. False (said on stderr) on a poll error.
bool trace_for(Tracer& t, pid_t pid, double duration) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(duration));
  while (!g_stop.load() && !t.process(pid)->exited && std::chrono::steady_clock::now() < deadline) {
    if (Result<int> n = t.poll(100); !n) {
      fprintf(stderr, "leakwatch: %s\n", n.error().message.c_str());
      return false;
    }
  }
  // Bounded: a process that allocates without pause refills the ring as
  // fast as it drains.
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < drain_end) {
    Result<int> n = t.poll(0);
    if (!n || *n == 0) break;
  }
  return true;
}

// Writes the process's profile (live since `started`, unix seconds) to
// `file`, named `out` in messages. Returns the exit code.
int write_profile(Tracer& t, pid_t pid, double started, OutputFile& file, const std::string& out) {
  TracedProcess& proc = *t.process(pid);
  // Symbols come from their own thread: the first pass queues the stacks,
  // the second takes what arrived (bounded wait; the rest stay
  // module+offset, which pprof shows as addresses).
  (void)take_snapshot(t, proc, 100000, false);
  (void)t.wait_for_symbols(std::chrono::seconds(5));
  ProcessSnapshot snap = take_snapshot(t, proc, 100000, false);
  PprofInput in = profile_input(snap, started);
  Result<std::string> gz = encode_pprof_gz(in);
  if (!gz) {
    fprintf(stderr, "leakwatch: %s\n", gz.error().message.c_str());
    return exit_code::kError;
  }
  Status written = file.write(gz->data(), gz->size());
  if (written) written = file.commit();
  if (!written) {
    fprintf(stderr, "leakwatch: writing %s: %s\n", out.c_str(), written.error().message.c_str());
    return exit_code::kError;
  }
  fprintf(stderr, "leakwatch: wrote %s: %zu sites, %llu live bytes\n", out.c_str(),
          snap.sites.size(), static_cast<unsigned long long>(snap.live_bytes));
  return exit_code::kOk;
}
}  // namespace

int run_snapshot(int argc, char** argv) {
  SnapshotOptions o;
  if (int rc = parse_snapshot_options(argc, argv, o); rc >= 0) return rc;
  const pid_t pid = o.pid;
  // Created first, so a path that will be refused (a symlink anywhere in
  // it, another user's file) fails before any tracing (core/platform/fd.h).
  std::vector<OutputFile> files;
  for (uint64_t n = 1; n <= o.count; ++n) {
    Result<OutputFile> file = create_output_file(series_path(o.out, n));
    if (!file) {
      fprintf(stderr, "leakwatch: writing %s: %s\n", series_path(o.out, n).c_str(), file.error().message.c_str());
      return exit_code::kError;
    }
    files.push_back(std::move(*file));
  }
  // From the start: a Ctrl-C while probes attach or tables load still
  // writes the profile of what was seen.
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  auto tracer = Tracer::create(BpfOptions{}, default_unwind_options(o.unwind_cache_dir));
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
  // The ring buffer is consumed meanwhile (Tracer::wait_for_tables).
  if (Result<bool> w = (*tracer)->wait_for_tables(std::chrono::seconds(30), g_stop); !w) {
    fprintf(stderr, "leakwatch: %s\n", w.error().message.c_str());
    return exit_code::kError;
  }
  fprintf(stderr, "leakwatch snapshot: attached to %d, tracing for %g s\n", pid, o.duration);
  raise_fd_limit();  // best effort: a snapshot of one process needs few fds
  Tracer& t = **tracer;
  const double started = std::chrono::duration<double>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  // A series (--count): every profile from this one attach, each of all
  // that is live since it, so two of them differ by what happened between.
  for (uint64_t n = 1; n <= o.count; ++n) {
    if (!trace_for(t, pid, o.duration)) return exit_code::kError;
    if (int rc = write_profile(t, pid, started, files[n - 1], series_path(o.out, n)); rc != exit_code::kOk)
      return rc;
    if (n < o.count && (g_stop.load() || t.process(pid)->exited)) {
      fprintf(stderr, "leakwatch snapshot: %s after profile %llu of %llu: the rest are not written\n",
              g_stop.load() ? "interrupted" : "the process exited", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(o.count));
      break;
    }
  }
  return exit_code::kOk;
}

}  // namespace lw
