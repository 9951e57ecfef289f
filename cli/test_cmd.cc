// SPDX-License-Identifier: Apache-2.0
// `leakwatch test [options] -- CMD ARGS`: the leak gate for CI (docs/cli.md;
// decision leak-gate). Starts CMD stopped at its entry point (as
// `top -c`, cli/launch.h), traces it to its exit, then reports the sites
// still holding memory, writes JSON, pprof and a baseline on request, and
// exits with the gate's failure code or the program's own (cli/gate_report.h).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/gate.h"
#include "cli/gate_report.h"
#include "cli/launch.h"
#include "cli/options.h"
#include "cli/run.h"
#include "core/platform/fd.h"
#include "core/platform/log.h"
#include "core/policy/live_map_size.h"
#include "engine/snapshot.h"
#include "engine/tracer.h"
#include "exporter/profile.h"
#include "view/json.h"

namespace lw {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct TestOptions {
  std::vector<std::string> command;
  std::string json_path, pprof_path, baseline_path, write_baseline_path;
  std::vector<std::string> suppression_paths;
  bool default_suppressions = true;
  gate::Rules rules;
  int error_exitcode = exit_code::kLeaksFound;
  size_t others = 10;  // passing sites listed in the report
  bool light = false;
  BpfOptions bpf;
};

void test_usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch test [options] -- PROG ARGS...\n"
          "Runs PROG traced from its first instruction; at its exit reports the call\n"
          "sites still holding memory and fails when the gate's rules say so.\n"
          "  --max-site-bytes N          fail when one site holds more than N bytes\n"
          "  --max-total-bytes N         fail when all unsuppressed sites hold more than N\n"
          "  --baseline FILE             fail on a site not in FILE (--write-baseline's)\n"
          "  --write-baseline FILE       write the sites held at exit to FILE\n"
          "  --suppressions FILE         leak:/function:/module: PATTERN lines (repeatable)\n"
          "  --no-default-suppressions   count the C/C++ runtimes' one-time allocations too\n"
          "  --match-depth N             frames of a site compared with the baseline\n"
          "                              (innermost N; default 0: the whole stack)\n"
          "  --json FILE                 the verdict and the final snapshot as JSON\n"
          "  --pprof FILE                a gzipped pprof profile of what is held at exit\n"
          "  --error-exitcode N          exit code when the gate fails (1..255, default 23)\n"
          "  --show N                    passing and suppressed sites listed (default 10)\n"
          "  --mode full|light           full (default): heap and mmap; light: mmap only\n"
          "  --unwind cfi|frame_pointers how stacks are found (default cfi)\n"
          "  --log-level LEVEL           debug|info|warn|error\n"
          "  -h, --help                  this text\n"
          "With no --max-*-bytes and no --baseline, every unsuppressed site fails.\n"
          "Exit codes: 23 the gate failed; else PROG's own (128+N when killed by signal N);\n"
          "1 error, 2 usage, 4 permission denied, 5 kernel unsupported before PROG ran.\n");
}

int usage_error(const std::string& msg) {
  fprintf(stderr, "leakwatch test: %s\n", msg.c_str());
  test_usage(stderr);
  return exit_code::kUsage;
}

enum {
  kOptMaxSite = 256, kOptMaxTotal, kOptBaseline, kOptWriteBaseline, kOptSuppressions,
  kOptNoDefaultSupp, kOptDepth, kOptJson, kOptPprof, kOptErrorExit, kOptShow, kOptMode,
  kOptUnwind, kOptLogLevel,
};

// One option into `o`. Returns an exit code, or -1 when it was taken.
int take_option(int c, TestOptions& o) {
  uint64_t n = 0;
  const std::string arg = optarg ? optarg : "";
  auto need_file = [&](std::string& into, const char* flag) {
    if (arg.empty()) return usage_error(std::string(flag) + " needs a file name");
    into = arg;
    return -1;
  };
  switch (c) {
    case kOptMaxSite:
    case kOptMaxTotal:
      if (!parse_u64(optarg, n)) return usage_error("--max-*-bytes needs a number of bytes (got '" + arg + "')");
      (c == kOptMaxSite ? o.rules.max_site_bytes : o.rules.max_total_bytes) = n;
      return -1;
    case kOptBaseline: return need_file(o.baseline_path, "--baseline");
    case kOptWriteBaseline: return need_file(o.write_baseline_path, "--write-baseline");
    case kOptJson: return need_file(o.json_path, "--json");
    case kOptPprof: return need_file(o.pprof_path, "--pprof");
    case kOptSuppressions:
      if (arg.empty()) return usage_error("--suppressions needs a file name");
      o.suppression_paths.push_back(arg);
      return -1;
    case kOptNoDefaultSupp: o.default_suppressions = false; return -1;
    case kOptDepth:
      if (!parse_u64(optarg, n) || n > 1024) return usage_error("--match-depth must be 0..1024 (got '" + arg + "')");
      o.rules.depth = n;
      return -1;
    case kOptErrorExit:
      if (!parse_u64(optarg, n) || n < 1 || n > 255) return usage_error("--error-exitcode must be 1..255 (got '" + arg + "')");
      o.error_exitcode = static_cast<int>(n);
      return -1;
    case kOptShow:
      if (!parse_u64(optarg, n) || n > 100000) return usage_error("--show must be 0..100000 (got '" + arg + "')");
      o.others = n;
      return -1;
    case kOptMode:
      if (arg != "full" && arg != "light") return usage_error("--mode must be full or light (got '" + arg + "')");
      o.light = arg == "light";
      return -1;
    case kOptUnwind:
      if (arg != "cfi" && arg != "frame_pointers") return usage_error("--unwind must be cfi or frame_pointers (got '" + arg + "')");
      o.bpf.unwind_cfi = arg == "cfi";
      return -1;
    case kOptLogLevel: {
      std::optional<LogLevel> level = parse_log_level(optarg);
      if (!level) return usage_error("--log-level must be debug, info, warn or error (got '" + arg + "')");
      set_log_level(*level);
      return -1;
    }
    default: return exit_code::kUsage;
  }
}

// Returns an exit code on error or --help, or -1.
int parse(int argc, char** argv, TestOptions& o) {
  static const struct option kLong[] = {
      {"max-site-bytes", required_argument, nullptr, kOptMaxSite},
      {"max-total-bytes", required_argument, nullptr, kOptMaxTotal},
      {"baseline", required_argument, nullptr, kOptBaseline},
      {"write-baseline", required_argument, nullptr, kOptWriteBaseline},
      {"suppressions", required_argument, nullptr, kOptSuppressions},
      {"no-default-suppressions", no_argument, nullptr, kOptNoDefaultSupp},
      {"match-depth", required_argument, nullptr, kOptDepth},
      {"json", required_argument, nullptr, kOptJson},
      {"pprof", required_argument, nullptr, kOptPprof},
      {"error-exitcode", required_argument, nullptr, kOptErrorExit},
      {"show", required_argument, nullptr, kOptShow},
      {"mode", required_argument, nullptr, kOptMode},
      {"unwind", required_argument, nullptr, kOptUnwind},
      {"log-level", required_argument, nullptr, kOptLogLevel},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  reset_getopt();
  int c;
  // "+": the first operand starts the command; its options are its own.
  while ((c = getopt_long(argc, argv, "+:h", kLong, nullptr)) != -1) {
    if (c == 'h') {
      test_usage(stdout);
      return exit_code::kOk;
    }
    if (c == '?' || c == ':') {
      report_bad_option("test", c, argv);
      test_usage(stderr);
      return exit_code::kUsage;
    }
    if (int rc = take_option(c, o); rc >= 0) return rc;
  }
  for (int i = optind; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) return usage_error("no program to run: leakwatch test [options] -- PROG ARGS...");
  return -1;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{errno, path + ": " + strerror(errno)};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The suppressions and the baseline, read before anything runs: a bad file
// is a usage error, not a gate failure.
int load_rules(const TestOptions& o, std::vector<gate::Suppression>& rules, gate::Rules& gate_rules) {
  if (o.default_suppressions) rules = gate::default_suppressions();
  for (const std::string& path : o.suppression_paths) {
    Result<std::string> text = read_file(path);
    if (!text) return usage_error("--suppressions " + text.error().message);
    Result<std::vector<gate::Suppression>> parsed = gate::parse_suppressions(*text, path);
    if (!parsed) return usage_error(parsed.error().message);
    rules.insert(rules.end(), parsed->begin(), parsed->end());
  }
  if (!o.baseline_path.empty()) {
    Result<std::string> text = read_file(o.baseline_path);
    if (!text) return usage_error("--baseline " + text.error().message);
    Result<std::set<std::string>> keys = gate::parse_baseline(*text, o.baseline_path);
    if (!keys) return usage_error(keys.error().message);
    gate_rules.baseline = std::move(*keys);
  }
  return -1;
}

// The output files, created before the program runs (core/platform/fd.h):
// a path that will be refused fails at once.
struct Outputs {
  std::optional<OutputFile> json, pprof, baseline;
};

int create_outputs(const TestOptions& o, Outputs& out) {
  auto make = [](const std::string& path, std::optional<OutputFile>& into) {
    if (path.empty()) return true;
    Result<OutputFile> f = create_output_file(path);
    if (!f) {
      fprintf(stderr, "leakwatch test: writing %s: %s\n", path.c_str(), f.error().message.c_str());
      return false;
    }
    into.emplace(std::move(*f));
    return true;
  };
  if (!make(o.json_path, out.json) || !make(o.pprof_path, out.pprof) ||
      !make(o.write_baseline_path, out.baseline))
    return exit_code::kError;
  return -1;
}

bool write_out(std::optional<OutputFile>& file, const std::string& path, const std::string& data) {
  if (!file) return true;
  Status st = file->write(data.data(), data.size());
  if (st) st = file->commit();
  if (!st) fprintf(stderr, "leakwatch test: writing %s: %s\n", path.c_str(), st.error().message.c_str());
  return static_cast<bool>(st);
}

// The tracer, CMD started stopped at its entry point, every probe attached
// and the unwind tables loaded, then CMD let run. Returns an exit code on
// failure, or -1.
int start_traced(TestOptions& o, std::unique_ptr<Tracer>& tracer, std::unique_ptr<LaunchedCommand>& launched) {
  const LiveMapSizing live_map = top_live_map_sizing(0);
  o.bpf.live_max_entries = live_map.entries;
  o.bpf.live_prealloc = live_map.preallocated;
  auto created = Tracer::create(o.bpf, default_unwind_options());
  if (!created) {
    fprintf(stderr, "leakwatch test: %s\n", created.error().message.c_str());
    return exit_code_for(created.error());
  }
  tracer = std::move(*created);
  // The program's stdout stays leakwatch's: the report goes to stderr.
  auto started = LaunchedCommand::start(o.command, STDOUT_FILENO);
  if (!started) {
    fprintf(stderr, "leakwatch test: %s\n", started.error().message.c_str());
    return exit_code::kError;
  }
  launched = std::move(*started);
  AttachOptions attach;
  attach.heap = !o.light;
  attach.follow_forks = true;  // only reported and counted: children are not traced
  if (Status st = tracer->attach(launched->pid(), attach); !st) {
    fprintf(stderr, "leakwatch test: attaching to %d: %s\n", launched->pid(), st.error().message.c_str());
    return exit_code_for(st.error());
  }
  if (Result<bool> w = tracer->wait_for_tables(std::chrono::seconds(30), g_stop); !w) {
    fprintf(stderr, "leakwatch test: %s\n", w.error().message.c_str());
    return exit_code::kError;
  }
  if (Status st = launched->resume(); !st) {
    fprintf(stderr, "leakwatch test: %s\n", st.error().message.c_str());
    return exit_code::kError;
  }
  return -1;
}

// Resolves the live sites' stacks while the program runs, at most every
// 100 ms: a Python frame is named from the code object in the process's
// memory, gone after the exit (a name once read is kept). Only once the
// poll path has checked every site's frames against the maps: a stack
// resolved against maps that lack a new library would keep it unnamed.
void resolve_while_alive(Tracer& t, pid_t pid) {
  static std::chrono::steady_clock::time_point next;
  const auto now = std::chrono::steady_clock::now();
  TracedProcess* proc = t.process(pid);
  if (now < next || !proc || proc->exited || !proc->python) return;
  next = now + std::chrono::milliseconds(100);
  (void)take_snapshot(t, *proc, SiteLimits(100000, 0), false);
}

// Consumes events until the program exits (or a signal ends the run: the
// program is then ended too), then what is still buffered (bounded: a
// program that allocates without pause refills the ring as fast as it
// drains). False on a poll error.
bool trace_to_exit(Tracer& t, LaunchedCommand& launched, bool& interrupted, uint64_t& children) {
  const pid_t pid = launched.pid();
  std::optional<std::chrono::steady_clock::time_point> zombie_since;
  while (!t.process(pid)->exited) {
    // The exit event normally ends the loop; should it be lost (a full ring
    // buffer), the child's own end does, a second later, without reaping it.
    siginfo_t info = {};
    // (After terminate() the child is reaped already: its status says it.)
    const bool ended = interrupted ? launched.reap(false).has_value()
                                   : waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
    if (ended) {
      if (!zombie_since) zombie_since = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() - *zombie_since > std::chrono::seconds(1)) break;
    }
    if (g_stop.load() && !interrupted) {
      interrupted = true;
      launched.terminate();
    }
    if (Result<int> n = t.poll(100); !n) {
      fprintf(stderr, "leakwatch test: %s\n", n.error().message.c_str());
      return false;
    }
    resolve_while_alive(t, pid);
    for (const Discovery& d : t.take_discoveries()) children += d.parent == pid;
  }
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < drain_end) {
    Result<int> n = t.poll(0);
    if (!n || *n == 0) break;
  }
  return true;
}

// The final live records, every site, named: the first pass queues the
// stacks for the symbol thread, the second takes what it resolved (from
// the files on disk after the exit; bounded wait).
ProcessSnapshot final_snapshot(Tracer& t, pid_t pid) {
  TracedProcess& proc = *t.process(pid);
  const SiteLimits all(100000, 0);
  (void)take_snapshot(t, proc, all, false);
  (void)t.wait_for_symbols(std::chrono::seconds(5));
  return take_snapshot(t, proc, all, false);
}

// The report, the files, the exit code.
int conclude(const TestOptions& o, const ProcessSnapshot& snap, const std::vector<gate::Suppression>& supp,
             const gate::RunEnd& end, double started, Outputs& out) {
  const gate::Verdict verdict = gate::evaluate(snap.sites, supp, o.rules);
  const std::string report = gate::text_report(verdict, o.rules, end, o.others);
  fputs(report.c_str(), stderr);
  // What was not recorded makes the held bytes a lower bound: said, never
  // silent (the JSON snapshot's `unrecorded` and `counters` carry it too).
  const uint64_t dropped = snap.kernel_counters[LW_CNT_EVENTS_DROPPED_RINGBUF];
  if (snap.unrecorded.any() || dropped > 0)
    fprintf(stderr,
            "leakwatch test: warning: %llu allocations not recorded (live map full), %llu without a stack, "
            "%llu events dropped (ring buffer full): the figures above are a lower bound\n",
            static_cast<unsigned long long>(snap.unrecorded.map_full),
            static_cast<unsigned long long>(snap.unrecorded.stack_map_full),
            static_cast<unsigned long long>(dropped));
  bool ok = true;
  if (out.json) {
    nlohmann::json j = {{"gate", gate::verdict_json(verdict, o.rules, end)}, {"snapshot", to_json(snap)}};
    ok &= write_out(out.json, o.json_path, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (out.pprof) {
    Result<std::string> gz = encode_pprof_gz(profile_input(snap, started));
    if (!gz) fprintf(stderr, "leakwatch test: %s\n", gz.error().message.c_str());
    ok &= gz && write_out(out.pprof, o.pprof_path, *gz);
  }
  if (out.baseline)
    ok &= write_out(out.baseline, o.write_baseline_path, gate::format_baseline(gate::baseline_keys(verdict)));
  if (!ok) return exit_code::kError;
  return gate::run_exit_code(verdict, end);
}

}  // namespace

int run_test(int argc, char** argv) {
  TestOptions o;
  if (int rc = parse(argc, argv, o); rc >= 0) return rc;
  std::vector<gate::Suppression> supp;
  if (int rc = load_rules(o, supp, o.rules); rc >= 0) return rc;
  Outputs out;
  if (int rc = create_outputs(o, out); rc >= 0) return rc;
  raise_fd_limit();
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<Tracer> tracer;
  std::unique_ptr<LaunchedCommand> launched;
  if (int rc = start_traced(o, tracer, launched); rc >= 0) return rc;
  const double started =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  gate::RunEnd end;
  end.program = o.command[0];
  end.gate_failure_code = o.error_exitcode;
  if (!trace_to_exit(*tracer, *launched, end.interrupted, end.children_untraced)) return exit_code::kError;
  const ProcessSnapshot snap = final_snapshot(*tracer, launched->pid());
  tracer.reset();  // every probe detached before the program is reaped
  end.wait_status = launched->reap(true);
  return conclude(o, snap, supp, end, started, out);
}

}  // namespace lw
