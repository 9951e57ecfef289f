// SPDX-License-Identifier: Apache-2.0
// `leakwatch top`: attach to one running process and print the stacks that
// hold its memory, once per interval, as a table or as JSON lines.
#include "cli/top.h"

#include "core/platform/fd.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_switches.h"
#include "cli/exit_codes.h"
#include "cli/launch.h"
#include "cli/options.h"
#include "cli/top_bursts.h"
#include "cli/top_printer.h"
#include "core/analysis/analyzer.h"
#include "core/platform/clock.h"
#include "core/policy/live_map_size.h"
#include "core/platform/log.h"
#include "core/config/config.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "lw_sampling.h"

namespace lw {

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

struct TopOptions {
  pid_t pid = 0;
  std::vector<std::string> command;  // -c / after "--": started here
  double interval_s = 1.0;
  long count = -1;  // -1: until the process exits or a signal
  bool json = false;
  size_t max_sites = 20;       // --top: by live bytes
  size_t max_by_rate = SIZE_MAX;  // --top-by-rate: more by leak rate; SIZE_MAX: as many as --top
  long stall_consumer_ms = 0;
  long slow_tables_ms = 0;  // fault testing: each unwind-table job waits this long
  std::string record_path;  // raw ring-buffer records, for bench/ replay
  uint64_t sample_mean_bytes = 0;  // byte sampling; 0 = every allocation
  bool no_auto_sampling = false;   // --no-auto-sampling (decision auto-sampling)
  std::optional<BurstParams> bursts;  // --bursts (decision busy-processes)
  std::string window;                 // --window, applied to `bursts` after parsing
  bool light = false;              // --mode light: no heap probes
  bool no_tensors = false;         // --no-tensors: no tensor tier (decision tensor-tier)
  LiveFilter filter;               // --older, --min-size, --max-size
  double analysis_window_s = 0;    // 0: the default analysis
  std::optional<LogLevel> log_level;
  std::string config_path;         // --config: only its `symbols` section is used
  double rss_interval_s = 15;      // --rss-interval: smaps read at most this often; 0: off
  BpfOptions bpf;
  uint32_t live_max = 0;  // --live-max; 0: automatic (decision live-map-sizing)
  std::optional<std::string> unwind_cache_dir;  // --unwind-cache-dir; "": none
};

std::vector<std::string> split_blanks(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

int usage_error(const char* fmt, const char* arg = "") {
  fprintf(stderr, "leakwatch top: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  top_usage(stderr);
  return exit_code::kUsage;
}

enum LongOnly {
  kOptJson = 256,
  kOptRingbuf,
  kOptLiveMax,
  kOptStackMax,
  kOptMode,
  kOptSampleMean,
  kOptNoAutoSampling,
  kOptBursts,
  kOptBurstWindow,
  kOptRecord,
  kOptStall,
  kOptSlowTables,
  kOptOlder,
  kOptMinSize,
  kOptMaxSize,
  kOptWindow,
  kOptLogLevel,
  kOptUnwind,
  kOptConfig,
  kOptNoPythonFrames,
  kOptNativeAbovePython,
  kOptNoTensors,
  kOptRssInterval,
  kOptUnwindCacheDir,
  kOptTopByRate,
};

// What a parse_*_option function returns besides an exit code.
constexpr int kTaken = -1;    // the option was valid and is stored
constexpr int kNotMine = -2;  // another function's option

// What is traced and how: the process, the maps, the probes, the unwinder
// and the fault-testing delays.
int parse_trace_option(int c, TopOptions& o, bool& have_pid, bool& have_command) {
  uint64_t n = 0;
  switch (c) {
    case 'p':
      if (!parse_u64(optarg, n) || n == 0 || n > 4194304) return usage_error("invalid pid '%s'", optarg);
      // Not the last one silently: top traces one process.
      if (have_pid)
        return usage_error("-p given twice: top traces one process (`leakwatch run` traces many); "
                           "start one top per process");
      o.pid = static_cast<pid_t>(n);
      have_pid = true;
      return kTaken;
    case 'c':
      o.command = split_blanks(optarg);
      if (o.command.empty()) return usage_error("-c needs a command");
      if (have_command) return usage_error("-c given twice: top traces one command");
      have_command = true;
      return kTaken;
    case kOptRingbuf:
      if (!parse_u64(optarg, n) || n < 4096 || n > (1u << 30) || (n & (n - 1)))
        return usage_error("--ringbuf-bytes must be a power of two in [4096, 1 GiB] (got '%s')", optarg);
      o.bpf.ringbuf_bytes = static_cast<uint32_t>(n);
      return kTaken;
    case kOptLiveMax:
      if (!parse_u64(optarg, n) || n < kLiveMapMinEntries || n > kLiveMapMaxEntries)
        return usage_error("--live-max must be between 16 and 67108864 (got '%s')", optarg);
      o.live_max = static_cast<uint32_t>(n);
      return kTaken;
    case kOptStackMax:
      if (!parse_u64(optarg, n) || n < 1 || n > (1u << 22))
        return usage_error("--stack-max must be between 1 and 4194304 (got '%s')", optarg);
      o.bpf.stack_max_entries = static_cast<uint32_t>(n);
      return kTaken;
    case kOptMode:
      if (strcmp(optarg, "full") != 0 && strcmp(optarg, "light") != 0)
        return usage_error("--mode must be full or light (got '%s')", optarg);
      o.light = strcmp(optarg, "light") == 0;
      return kTaken;
    case kOptSampleMean:
      if (!parse_u64(optarg, n) || n < 1 || n > LW_SAMPLE_MAX_MEAN)
        return usage_error("--sample-mean must be between 1 and 1073741824 (got '%s')", optarg);
      o.sample_mean_bytes = n;
      return kTaken;
    case kOptNoAutoSampling:
      o.no_auto_sampling = true;
      return kTaken;
    case kOptBursts: {
      std::string error;
      o.bursts = parse_bursts(optarg, &error);
      if (!o.bursts) return usage_error("%s", error.c_str());
      return kTaken;
    }
    case kOptBurstWindow:
      o.window = optarg;
      return kTaken;
    case kOptUnwind:
      if (strcmp(optarg, "cfi") != 0 && strcmp(optarg, "frame_pointers") != 0)
        return usage_error("--unwind must be cfi or frame_pointers (got '%s')", optarg);
      o.bpf.unwind_cfi = strcmp(optarg, "cfi") == 0;
      return kTaken;
    case kOptUnwindCacheDir:  // the config's unwind.cache_dir
      if (*optarg && *optarg != '/')
        return usage_error("--unwind-cache-dir must be an absolute path or '' (got '%s')", optarg);
      o.unwind_cache_dir = optarg;
      return kTaken;
    case kOptNoPythonFrames:  // decision python-frames
      o.bpf.python_frames = false;
      return kTaken;
    case kOptNativeAbovePython:  // decision python-frames, "Where the native walk stops"
      o.bpf.python_native_above = true;
      return kTaken;
    case kOptNoTensors:  // decision tensor-tier
      o.no_tensors = true;
      return kTaken;
    case kOptStall:
      if (!parse_u64(optarg, n) || n > 600000)
        return usage_error("--debug-stall-consumer-ms must be <= 600000 (got '%s')", optarg);
      o.stall_consumer_ms = static_cast<long>(n);
      return kTaken;
    case kOptSlowTables:
      if (!parse_u64(optarg, n) || n > 600000)
        return usage_error("--debug-slow-tables-ms must be <= 600000 (got '%s')", optarg);
      o.slow_tables_ms = static_cast<long>(n);
      return kTaken;
    default:
      return kNotMine;
  }
}

// What is shown, how often, and what else is read or written: the
// snapshots, their filters, the analysis, RSS, the log, the config and the
// recorded events.
int parse_view_option(int c, TopOptions& o) {
  uint64_t n = 0;
  double d = 0;
  switch (c) {
    case 'i':
      if (!parse_number(optarg, 0.05, 86400, d))
        return usage_error("--interval must be between 0.05 and 86400 seconds (got '%s')", optarg);
      o.interval_s = d;
      return kTaken;
    case 'n':
      if (!parse_u64(optarg, n) || n == 0 || n > (1ull << 40))
        return usage_error("--count must be a positive integer (got '%s')", optarg);
      o.count = static_cast<long>(n);
      return kTaken;
    case 'k':
      if (!parse_u64(optarg, n) || n == 0 || n > 100000)
        return usage_error("--top must be between 1 and 100000 (got '%s')", optarg);
      o.max_sites = n;
      return kTaken;
    case kOptTopByRate:
      if (!parse_u64(optarg, n) || n > 100000)
        return usage_error("--top-by-rate must be between 0 and 100000 (got '%s')", optarg);
      o.max_by_rate = n;
      return kTaken;
    case kOptJson:
      o.json = true;
      return kTaken;
    case kOptOlder:
      if (!parse_number(optarg, 0, 86400, d))
        return usage_error("--older must be between 0 and 86400 seconds (got '%s')", optarg);
      o.filter.min_age_ns = static_cast<uint64_t>(d * 1e9);
      return kTaken;
    case kOptMinSize:
      if (!parse_u64(optarg, n)) return usage_error("--min-size must be a number of bytes (got '%s')", optarg);
      o.filter.min_size = n;
      return kTaken;
    case kOptMaxSize:
      if (!parse_u64(optarg, n)) return usage_error("--max-size must be a number of bytes (got '%s')", optarg);
      o.filter.max_size = n;
      return kTaken;
    case kOptRssInterval:  // docs/cli.md, "rss:"; decision rss-explained
      if (!parse_number(optarg, 0, 3600, d) || (d > 0 && d < 1))
        return usage_error("--rss-interval must be 0 (off) or between 1 and 3600 seconds (got '%s')", optarg);
      o.rss_interval_s = d;
      return kTaken;
    case kOptWindow:
      if (!parse_number(optarg, 30, 86400, d))
        return usage_error("--analysis-window must be between 30 and 86400 seconds (got '%s')", optarg);
      o.analysis_window_s = d;
      return kTaken;
    case kOptLogLevel:
      o.log_level = parse_log_level(optarg);
      if (!o.log_level) return usage_error("--log-level must be debug, info, warn or error (got '%s')", optarg);
      return kTaken;
    case kOptConfig:
      if (!*optarg) return usage_error("--config needs a file name");
      o.config_path = optarg;
      return kTaken;
    case kOptRecord:
      if (!*optarg) return usage_error("--record-events needs a file name");
      o.record_path = optarg;
      return kTaken;
    default:
      return kNotMine;
  }
}

// Returns an exit code on error or --help, or -1 when parsing succeeded.
int parse(int argc, char** argv, TopOptions& o) {
  static const struct option kLong[] = {
      {"pid", required_argument, nullptr, 'p'},
      {"command", required_argument, nullptr, 'c'},
      {"interval", required_argument, nullptr, 'i'},
      {"count", required_argument, nullptr, 'n'},
      {"top", required_argument, nullptr, 'k'},
      {"top-by-rate", required_argument, nullptr, kOptTopByRate},
      {"help", no_argument, nullptr, 'h'},
      {"json", no_argument, nullptr, kOptJson},
      {"ringbuf-bytes", required_argument, nullptr, kOptRingbuf},
      {"live-max", required_argument, nullptr, kOptLiveMax},
      {"stack-max", required_argument, nullptr, kOptStackMax},
      {"mode", required_argument, nullptr, kOptMode},
      {"sample-mean", required_argument, nullptr, kOptSampleMean},
      {"no-auto-sampling", no_argument, nullptr, kOptNoAutoSampling},
      {"bursts", required_argument, nullptr, kOptBursts},
      {"window", required_argument, nullptr, kOptBurstWindow},
      {"record-events", required_argument, nullptr, kOptRecord},
      {"debug-stall-consumer-ms", required_argument, nullptr, kOptStall},
      {"debug-slow-tables-ms", required_argument, nullptr, kOptSlowTables},
      {"older", required_argument, nullptr, kOptOlder},
      {"min-size", required_argument, nullptr, kOptMinSize},
      {"max-size", required_argument, nullptr, kOptMaxSize},
      {"analysis-window", required_argument, nullptr, kOptWindow},
      {"log-level", required_argument, nullptr, kOptLogLevel},
      {"unwind", required_argument, nullptr, kOptUnwind},
      {"unwind-cache-dir", required_argument, nullptr, kOptUnwindCacheDir},
      {"config", required_argument, nullptr, kOptConfig},
      {"no-python-frames", no_argument, nullptr, kOptNoPythonFrames},
      {"native-frames-above-python", no_argument, nullptr, kOptNativeAbovePython},
      {"no-tensors", no_argument, nullptr, kOptNoTensors},
      {"rss-interval", required_argument, nullptr, kOptRssInterval},
      {nullptr, 0, nullptr, 0},
  };
  bool have_pid = false;
  bool have_command = false;
  reset_getopt();
  int c;
  while ((c = getopt_long(argc, argv, ":p:c:i:n:k:h", kLong, nullptr)) != -1) {
    if (c == 'h') {
      top_usage(stdout);
      return exit_code::kOk;
    }
    int rc = parse_trace_option(c, o, have_pid, have_command);
    if (rc == kNotMine) rc = parse_view_option(c, o);
    if (rc == kNotMine) {
      report_bad_option("top", c, argv);
      top_usage(stderr);
      return exit_code::kUsage;
    }
    if (rc != kTaken) return rc;
  }
  // Operands (after "--"): the command to start.
  if (optind < argc) {
    if (have_command) return usage_error("give the command either with -c or after --, not both");
    o.command.assign(argv + optind, argv + argc);
    have_command = true;
  }
  if (have_pid == have_command)
    return usage_error(have_pid ? "-p and -c exclude each other" : "-p PID or -c COMMAND is required");
  if (o.filter.min_size > o.filter.max_size) return usage_error("--min-size is above --max-size");
  if (o.bursts && o.light) return usage_error("--bursts needs the heap probes: not with --mode light");
  if (std::string error; !o.window.empty() && !parse_window(o.window, o.bursts, &error))
    return usage_error("%s", error.c_str());
  if (o.max_by_rate == SIZE_MAX) o.max_by_rate = o.max_sites;  // documented default: K
  return -1;
}

// Columns for the text view: COLUMNS, else the terminal's, else 80.
size_t text_width() {
  if (const char* env = getenv("COLUMNS")) {
    uint64_t n = 0;
    if (parse_u64(env, n) && n > 0 && n <= 100000) return n;
  }
  struct winsize ws = {};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// The reader of stdout went away (a pipe's read end closed, a terminal
// hung up): poll reports it without a write.
bool output_closed() {
  struct pollfd p = {STDOUT_FILENO, 0, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

// The leak analysis: the defaults, or the demo window with its time
// constants scaled (docs/cli.md, --analysis-window).
AnalysisParams analysis_params(double window_s) {
  AnalysisParams p;
  if (window_s <= 0) return p;
  const double scale = window_s / p.window_s;
  p.window_s = window_s;
  p.min_span_s *= scale;
  p.old_age_s *= scale;
  return p;
}

// From the start: a Ctrl-C while probes attach or tables load ends top
// with its last word, and the handler replaces a SIGINT a shell made
// ignored (a job started with `&` from a script inherits SIG_IGN).
void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The tracer, its live map sized for this host (decision live-map-sizing),
// with the `symbols` section of --config. Returns an exit code on failure,
// or -1.
int create_tracer(TopOptions& opt, const BenchSwitches& bench, std::unique_ptr<Tracer>& out) {
  UnwindTableOptions unwind_opts = default_unwind_options(opt.unwind_cache_dir);
  unwind_opts.debug_job_delay_ms = static_cast<uint32_t>(opt.slow_tables_ms);
  const LiveMapSizing live_map = top_live_map_sizing(opt.live_max);
  opt.bpf.live_max_entries = live_map.entries;
  opt.bpf.live_prealloc = live_map.preallocated;
  apply_bench_switches(bench, opt.bpf);
  auto tracer = Tracer::create(opt.bpf, unwind_opts);
  if (!tracer) {
    fprintf(stderr, "leakwatch: %s\n", tracer.error().message.c_str());
    return exit_code_for(tracer.error());
  }
  log_live_map(live_map);  // once it exists: a refusal is the first thing said
  if (!opt.config_path.empty()) {
    std::vector<ConfigError> errors;
    auto config = load_config_file(opt.config_path, &errors);
    if (!config) {
      for (const ConfigError& e : errors) fprintf(stderr, "%s\n", format_error(e).c_str());
      if (errors.empty()) fprintf(stderr, "leakwatch: %s\n", config.error().message.c_str());
      return exit_code::kUsage;
    }
    (*tracer)->configure_symbols(config->symbols);
  }
  out = std::move(*tracer);
  return -1;
}

// Starts -c's program (stopped before its first instruction) if there is
// one, and attaches to the process. Returns an exit code on failure, or -1.
int start_and_attach(TopOptions& opt, const BenchSwitches& bench, Tracer& tracer,
                     std::unique_ptr<LaunchedCommand>& launched) {
  if (!opt.command.empty()) {
    auto started = LaunchedCommand::start(opt.command, STDERR_FILENO);
    if (!started) {
      fprintf(stderr, "leakwatch top: %s\n", started.error().message.c_str());
      return exit_code::kError;
    }
    launched = std::move(*started);
    opt.pid = launched->pid();
  }
  AttachOptions attach_opts;
  attach_opts.sample_mean_bytes = opt.sample_mean_bytes;
  attach_opts.auto_sampling = !opt.no_auto_sampling;
  attach_opts.heap = !opt.light;
  attach_opts.tensors = !opt.no_tensors;
  // Benchmarks only (bench/README.md, "operator new"): also place the probes
  // that only lend a hint to the unwinder, to measure what dropping them saves.
  attach_opts.hint_probes = bench.hint_probes;
  if (Status st = tracer.attach(opt.pid, attach_opts); !st) {
    fprintf(stderr, "leakwatch: attaching to %d: %s\n", opt.pid, st.error().message.c_str());
    return exit_code_for(st.error());
  }
  return -1;
}

// Waits for the unwind tables, then lets -c's program run. Returns an exit
// code on failure, or -1.
//
// The first output comes once every probe is attached and the unwind
// tables of what the process maps are loaded (bounded wait): a caller
// can wait for it before starting the workload, and a program started
// by -c runs only then, so even its first allocation unwinds by CFI.
// The ring buffer is consumed while waiting: a running process's events
// are applied, not dropped (an 8 MiB ring fills in about a second of
// PyTorch inference, and its tables take seconds to load).
int wait_tables_then_resume(Tracer& tracer, LaunchedCommand* launched) {
  if (Result<bool> w = tracer.wait_for_tables(std::chrono::seconds(30), g_stop); !w) {
    fprintf(stderr, "leakwatch: %s\n", w.error().message.c_str());
    return exit_code::kError;
  }
  // Every probe is in place: the program may run its first instruction.
  if (launched) {
    if (Status st = launched->resume(); !st) {
      fprintf(stderr, "leakwatch top: %s\n", st.error().message.c_str());
      return exit_code::kError;
    }
  }
  return -1;
}

double seconds_since_epoch(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// `top` once every probe is in: the snapshots (the first at once, then one
// per interval until the process exits, a signal, --count or a closed
// output, then the last word), the leak analysis they sample, and the
// events recorded on the side. Not thread-safe: `top`'s thread only.
class TopRun {
 public:
  using clock = std::chrono::steady_clock;

  // `record`: --record-events' file, which the ring buffer's records are
  // tapped into from now on.
  TopRun(const TopOptions& opt, Tracer& tracer, const AnalysisParams& params,
         std::optional<OutputFile> record)
      : opt_(opt),
        t_(tracer),
        analyzer_(params),
        rss_(opt.rss_interval_s),
        started_(clock::now()),
        t0_(seconds_since_epoch(started_)),
        filter_(opt.filter.active() ? &opt.filter : nullptr),
        record_(std::move(record)) {
    if (record_) t_.set_record_tap([this](const void* data, size_t len) { (void)record_->write(data, len); });
  }
  TopRun(const TopRun&) = delete;  // the record tap holds `this`
  TopRun& operator=(const TopRun&) = delete;

  // The snapshots until the end, the last word included. Returns an exit
  // code when a poll or a recorded write failed (top ends at once), or -1.
  int print_until_the_end();

  // After the tracer is gone: the recorded events committed. Returns the
  // exit code.
  int finish() {
    if (record_failed(true)) failed_ = true;
    return failed_ ? exit_code::kError : exit_code::kOk;
  }

 private:
  ProcessSnapshot snapshot(TracedProcess& proc) {
    double now = seconds_since_epoch(clock::now());
    analyzer_.sample(proc.heap, now - t0_, monotonic_ns());
    ProcessSnapshot snap = take_snapshot(t_, proc, SiteLimits(opt_.max_sites, opt_.max_by_rate), opt_.json, &analyzer_, filter_);
    // RSS explained (decision rss-explained): the smaps read is rate-bounded;
    // an active filter narrows the live figures, so no breakdown then.
    if (opt_.rss_interval_s > 0 && !filter_ && !snap.final)
      snap.rss = rss_.sample(snap.pid, snap.timestamp, rss_tracked_bytes(snap));
    return snap;
  }

  // Before the last output (the last word, or --count's last table): the
  // stacks it shows are resolved once, which queues their frames, and the
  // symbol thread (its own thread) gets a moment for them, so the last
  // output names what it can. No sample: the output's snapshot takes it.
  void names_grace(TracedProcess& proc) {
    const SiteLimits limits(opt_.max_sites, opt_.max_by_rate);
    (void)take_snapshot(t_, proc, limits, opt_.json, &analyzer_, filter_);
    (void)t_.wait_for_symbols(std::chrono::seconds(2));
  }

  // Returns false when the output is gone or broken; failed_ then says
  // whether that is an error (not a reader that went away).
  bool print(const ProcessSnapshot& snap) {
    if (print_snapshot(snap, opt_.json, TextOptions{text_width()})) return true;
    failed_ = errno != EPIPE;
    if (failed_) fprintf(stderr, "leakwatch top: writing the output: %s\n", strerror(errno));
    return false;
  }

  // Whether writing the recorded events failed (said on stderr); `finish`
  // commits the file.
  bool record_failed(bool finish) {
    if (!record_) return false;
    Status st = finish ? record_->commit() : record_->status();
    if (st) return false;
    fprintf(stderr, "leakwatch: --record-events %s: %s\n", opt_.record_path.c_str(),
            st.error().message.c_str());
    return true;
  }

  // What follow() returns when the output is gone or broken.
  static constexpr int kOutputGone = -2;

  bool print_first();
  int follow(bool& counted_out);
  bool last_word();

  const TopOptions& opt_;
  Tracer& t_;
  ProcessAnalyzer analyzer_;
  RssSampler rss_;
  const clock::time_point started_;
  const double t0_;
  const LiveFilter* const filter_;
  // Recorded events: every write checked; a failed one ends `top` with an
  // error (core/platform/fd.h, OutputFile).
  std::optional<OutputFile> record_;
  bool failed_ = false;
  TopBursts bursts_;  // --bursts
};

// Once every probe is attached: the JSON view prints its first snapshot
// (a caller can wait for it before starting the workload), the text view
// says so in one line and shows its first table one interval later,
// when there is something to show.
bool TopRun::print_first() {
  ProcessSnapshot first = snapshot(*t_.process(opt_.pid));
  if (opt_.json) return print(first);
  if (print_attached(first, opt_.interval_s, TextOptions{text_width()})) return true;
  failed_ = errno != EPIPE;
  return false;
}

// One snapshot per interval while the process lives and the output is
// read. Returns an exit code when top must end at once, or -1; `counted_out`
// says whether --count ended it.
int TopRun::follow(bool& counted_out) {
  const auto interval =
      std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(opt_.interval_s));
  // From the first sample, so that the samples are an interval apart
  // (the analysis's wait estimate measures their spacing).
  auto next = started_ + interval;
  long printed = 0;
  while (true) {
    TracedProcess* proc = t_.process(opt_.pid);
    if (proc->exited || g_stop.load()) return -1;
    if (output_closed()) return kOutputGone;
    auto now = clock::now();
    if (now >= next) {
      // --count's last table is the last output: the same grace for names
      // as the last word's.
      if (opt_.count > 0 && printed + 1 >= opt_.count) names_grace(*proc);
      if (!print(snapshot(*proc))) return kOutputGone;
      if (opt_.count > 0 && ++printed >= opt_.count) {
        counted_out = true;
        return -1;
      }
      next += interval;
      if (next < now) next = now + interval;
      continue;
    }
    if (Status st = bursts_.tick(t_, opt_.pid, seconds_since_epoch(now)); !st)
      fprintf(stderr, "leakwatch: --bursts: %s\n", st.error().message.c_str());
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    Result<int> n = t_.poll(static_cast<int>(std::min<long>(wait + 1, 100)));
    if (!n) {
      fprintf(stderr, "leakwatch: %s\n", n.error().message.c_str());
      return exit_code::kError;
    }
    if (record_failed(false)) return exit_code::kError;
  }
}

// Exit or signal: applies what is still buffered, then prints the last
// word. False when the output failed.
bool TopRun::last_word() {
  // Bounded: a process that allocates without pause refills the ring as
  // fast as it drains.
  const auto drain_end = clock::now() + std::chrono::seconds(2);
  while (clock::now() < drain_end) {
    Result<int> n = t_.poll(0);
    if (!n || *n == 0) break;
  }
  names_grace(*t_.process(opt_.pid));
  return print(snapshot(*t_.process(opt_.pid)));
}

int TopRun::print_until_the_end() {
  if (opt_.bursts) {
    if (Status st = bursts_.start(t_, opt_.pid, *opt_.bursts, seconds_since_epoch(clock::now())); !st) {
      fprintf(stderr, "leakwatch: --bursts: %s\n", st.error().message.c_str());
      return exit_code::kError;
    }
  }
  if (!print_first()) return -1;
  if (opt_.stall_consumer_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(opt_.stall_consumer_ms));
  bool counted_out = false;
  const int rc = follow(counted_out);
  if (rc == kOutputGone) return -1;
  if (rc >= 0) return rc;
  if (!counted_out) (void)last_word();
  return -1;
}

// Detaches every probe, then reaps -c's program (ended if it is still
// running) and says how it ended.
void detach_and_reap(std::unique_ptr<Tracer>& tracer, LaunchedCommand* launched, const TopOptions& opt) {
  tracer.reset();  // every probe detached now, before waiting on a started program
  if (!launched) return;
  std::optional<int> status = launched->reap(false);
  if (!status) {
    launched->terminate();
    status = launched->reap(false);
  }
  if (status)
    fprintf(stderr, "leakwatch top: %s %s\n", opt.command[0].c_str(),
            LaunchedCommand::describe(*status).c_str());
}

}  // namespace

int run_top(int argc, char** argv) {
  TopOptions opt;
  if (int rc = parse(argc, argv, opt); rc >= 0) return rc;
  if (opt.log_level) set_log_level(*opt.log_level);
  raise_fd_limit();
  install_stop_handlers();
  if (opt.pid > 0 && kill(opt.pid, 0) != 0 && errno == ESRCH) {
    fprintf(stderr, "leakwatch: no such process: %d\n", opt.pid);
    return exit_code::kNoSuchProcess;
  }
  const BenchSwitches bench = read_bench_switches();  // docs/cli.md, "Benchmark switches"
  if (!bench.error.empty()) {
    fprintf(stderr, "leakwatch: %s\n", bench.error.c_str());
    return exit_code::kUsage;
  }
  // BPF first: a program started by -c must not run untraced because
  // leakwatch lacks a capability.
  std::unique_ptr<Tracer> tracer;
  if (int rc = create_tracer(opt, bench, tracer); rc >= 0) return rc;
  std::unique_ptr<LaunchedCommand> launched;
  if (int rc = start_and_attach(opt, bench, *tracer, launched); rc >= 0) return rc;
  if (int rc = wait_tables_then_resume(*tracer, launched.get()); rc >= 0) return rc;
  // A closed output is seen as EPIPE (and by output_closed()), so top can
  // detach and exit cleanly instead of dying mid-way.
  signal(SIGPIPE, SIG_IGN);

  std::optional<OutputFile> record;
  if (!opt.record_path.empty()) {
    Result<OutputFile> file = create_output_file(opt.record_path, OutputFile::Publish::kNow);
    if (!file) {
      fprintf(stderr, "leakwatch: --record-events %s: %s\n", opt.record_path.c_str(),
              file.error().message.c_str());
      return exit_code::kError;
    }
    record.emplace(std::move(*file));
  }
  // Leak analysis (docs/analysis.md), sampled at every snapshot; samples
  // closer than its resolution are merged.
  const AnalysisParams params = analysis_params(opt.analysis_window_s);
  if (std::string why = params.invalid_reason(); !why.empty()) {
    fprintf(stderr, "leakwatch top: --analysis-window: %s\n", why.c_str());
    return exit_code::kUsage;
  }
  TopRun run(opt, *tracer, params, std::move(record));
  if (int rc = run.print_until_the_end(); rc >= 0) return rc;
  detach_and_reap(tracer, launched.get(), opt);
  return run.finish();
}

}  // namespace lw
