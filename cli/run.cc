// SPDX-License-Identifier: Apache-2.0
#include "cli/run.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/bench_switches.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "core/config/config.h"
#include "core/platform/capabilities.h"
#include "core/platform/daemon_user.h"
#include "core/platform/log.h"
#include "core/symbols/debuginfod.h"
#include "core/platform/sandbox.h"
#include "core/platform/sd_notify.h"
#include "service/daemon.h"
#include "exporter/http/http_server.h"
#include "exporter/http/web_config.h"

namespace lw {

namespace {

std::atomic<Daemon*> g_daemon{nullptr};

// After a switch from root, the account's other processes (nobody's are
// many) could signal the daemon: stop it, reload it, toggle the kill
// switch. Only root's signals and the kernel's (a terminal's ^C) are
// obeyed then; the others are counted (decision unprivileged-uid).
bool obeyed(const siginfo_t* info) {
  if (!signals_from_root_only() || info == nullptr || info->si_code > 0) return true;
  if (info->si_uid == 0) return true;
  note_signal_refused();
  return false;
}

void on_stop(int, siginfo_t* info, void*) {
  if (Daemon* d = g_daemon.load(); d && obeyed(info)) d->request_stop();
}
void on_hup(int, siginfo_t* info, void*) {
  if (Daemon* d = g_daemon.load(); d && obeyed(info)) d->request_reload();
}
void on_usr2(int, siginfo_t* info, void*) {
  if (Daemon* d = g_daemon.load(); d && obeyed(info)) d->request_kill_switch_toggle();
}

void run_usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch run [options]\n"
          "  -c, --config FILE           the config file (docs/config.md); without it every\n"
          "                              process on the host in auto mode (built-in default)\n"
          "      --log-level LEVEL       debug|info|warn|error; overrides the config's\n"
          "                              log_level (debug also shows libbpf's messages)\n"
          "      --log.format FORMAT     text|logfmt|json; overrides the config's log_format\n"
          "      --web.config.file FILE  TLS and basic auth (exporter-toolkit format);\n"
          "                              overrides web_config_file, \"\" turns them off\n"
          "      --pods-dir DIR          kubelet pod log directory (default /var/log/pods)\n"
          "  -h, --help                  this text\n"
          "The daemon: SIGHUP (or a change to the file) reloads the config, SIGUSR2\n"
          "toggles the kill switch, SIGTERM/SIGINT detach everything and exit 0.\n"
          "See docs/cli.md and docs/config.md.\n");
}

void check_config_usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch check-config FILE [--web.config.file WEB_CONFIG]\n"
          "Validates a leakwatch config file (docs/config.md) and the web config\n"
          "`run` would load with it (the file's web_config_file, or the option).\n"
          "Exit 0 when both are valid; otherwise exit 1 with every error as\n"
          "FILE:LINE:COLUMN: message.\n"
          "      --web.config.file FILE  the web config (TLS, basic auth), as for run\n"
          "  -h, --help                  this text\n");
}

// `run`'s command line: the daemon options, and the web config flag, which
// overrides the config's web_config_file ("" turns TLS and auth off).
struct RunFlags {
  DaemonOptions options;
  std::optional<std::string> web_config_flag;
};

// Parses `run`'s options into `flags`. Returns the exit code when the
// command ends here (help, usage error), else -1.
int parse_run_flags(int argc, char** argv, RunFlags& flags) {
  enum { kOptWebConfig = 256, kOptLogLevel, kOptPodsDir, kOptLogFormat };
  static const struct option kLong[] = {
      {"config", required_argument, nullptr, 'c'},
      {"help", no_argument, nullptr, 'h'},
      // Prometheus exporters' flag (kingpin): usually written with '='.
      {"web.config.file", required_argument, nullptr, kOptWebConfig},
      {"log-level", required_argument, nullptr, kOptLogLevel},
      {"log.format", required_argument, nullptr, kOptLogFormat},
      {"pods-dir", required_argument, nullptr, kOptPodsDir},
      {nullptr, 0, nullptr, 0},
  };
  DaemonOptions& options = flags.options;
  reset_getopt();
  int c;
  while ((c = getopt_long(argc, argv, ":c:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'c':
        options.config_path = optarg;
        break;
      case kOptWebConfig:
        flags.web_config_flag = optarg;
        break;
      case kOptLogLevel:
        options.log_level_override = parse_log_level(optarg);
        if (!options.log_level_override) {
          fprintf(stderr, "leakwatch run: --log-level must be debug, info, warn or error (got '%s')\n",
                  optarg);
          run_usage(stderr);
          return exit_code::kUsage;
        }
        break;
      case kOptPodsDir:
        options.pods.root = optarg;
        break;
      case kOptLogFormat: {
        LogFormat format = LogFormat::kText;
        if (!parse_log_format(optarg, &format)) {
          fprintf(stderr, "leakwatch run: --log.format must be text, logfmt or json (got '%s')\n", optarg);
          run_usage(stderr);
          return exit_code::kUsage;
        }
        options.log_format_override = format;
        // The config's errors are logged in it too.
        set_log_format(format);
        break;
      }
      case 'h':
        run_usage(stdout);
        return exit_code::kOk;
      default:
        report_bad_option("run", c, argv);
        run_usage(stderr);
        return exit_code::kUsage;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "leakwatch run: unexpected argument '%s'\n", argv[optind]);
    run_usage(stderr);
    return exit_code::kUsage;
  }
  return -1;
}

// The config file, or without --config every process on the host in `auto`
// mode (light, escalated while growing), all other keys at their defaults.
// Logs the errors when there is none.
std::optional<Config> load_daemon_config(const DaemonOptions& options) {
  std::vector<ConfigError> errors;
  Result<Config> cfg = options.config_path.empty() ? Result<Config>(default_daemon_config())
                                                   : load_config_file(options.config_path, &errors);
  if (options.config_path.empty())
    LW_LOG_INFO("no --config: watching every process in auto mode (built-in default)");
  if (!cfg) {
    for (const ConfigError& e : errors) LW_LOG_ERROR("%s", format_error(e).c_str());
    return std::nullopt;
  }
  return std::move(*cfg);
}

// Started as root: hands the directories the daemon writes to
// `sandbox_user`, then switches to it (decision unprivileged-uid). False
// (logged, naming the key) when the user or a directory is wrong or the
// switch fails: the daemon then does not start, rather than stay root.
bool switch_to_sandbox_user(const Config& cfg) {
  if (!running_as_root()) return true;  // DynamicUser, or started by a user
  if (cfg.sandbox_user == "root") {
    LW_LOG_WARN("sandbox: uid 0 kept (config 'sandbox_user: root'): without CAP_DAC_OVERRIDE it can still "
                "write every file root owns");
    return true;
  }
  Result<DaemonUser> user = find_user(cfg.sandbox_user);
  if (!user) {
    LW_LOG_ERROR("config: sandbox_user: %s (name an existing account, or root to keep uid 0)",
                 user.error().message.c_str());
    return false;
  }
  if (user->uid == 0) {
    LW_LOG_WARN("sandbox: uid 0 kept: sandbox_user '%s' has uid 0", user->name.c_str());
    return true;
  }
  // A container's root may hold only the five (the DaemonSet).
  if (std::string missing = missing_capabilities({CAP_SETUID, CAP_SETGID, CAP_CHOWN}); !missing.empty()) {
    LW_LOG_ERROR("config: sandbox_user: switching from root to '%s' needs %s, which this process lacks (a "
                 "container's root?): grant them, or set 'sandbox_user: root' to keep uid 0",
                 user->name.c_str(), missing.c_str());
    return false;
  }
  // What it writes after the switch (docs/config.md): debuginfod's cache
  // only when fetching is on at start.
  const struct {
    const char* key;
    std::string dir;
    mode_t mode;
  } dirs[] = {{"oom.report_dir", cfg.oom.report_dir, 0750},
              {"unwind.cache_dir", cfg.unwind.cache_dir, 0700},
              {"symbols.cache_dir", cfg.symbols.debuginfod_urls.empty() ? std::string() : cfg.symbols.cache_dir,
               0700}};
  for (const auto& d : dirs) {
    if (d.dir.empty()) continue;
    Result<UserDirAction> done = prepare_user_dir(d.dir, d.mode, *user);
    if (!done) {
      LW_LOG_ERROR("config: %s: %s", d.key, done.error().message.c_str());
      return false;
    }
    if (*done != UserDirAction::kNone)
      LW_LOG_INFO("sandbox: %s %s %s %s", d.key, d.dir.c_str(),
                  *done == UserDirAction::kCreated ? "created for" : "handed over to", user->name.c_str());
  }
  // Root may write the notify socket; the user may not (sd_notify.h).
  sd_notify_connect();
  if (Status st = switch_user(user->uid, user->gid); !st) {
    LW_LOG_ERROR("sandbox: switching to sandbox_user '%s' (uid %u): %s (a root without CAP_SETUID and "
                 "CAP_SETGID, as in a container, needs 'sandbox_user: root')",
                 user->name.c_str(), user->uid, st.error().message.c_str());
    return false;
  }
  set_daemon_user_name(user->name);
  set_signals_from_root_only();
  return true;
}

// Keeps only the documented capabilities (core/platform/sandbox.h), or says
// the sandbox is off. Run before any thread starts, so every thread inherits
// it. Binding a port under 1024 happens later, at the HTTP start, and needs
// one more. False (logged) when the capabilities cannot be restricted.
bool restrict_daemon_capabilities(const Config& cfg) {
  if (!cfg.sandbox) {
    LW_LOG_WARN("sandbox: off (config 'sandbox: false'): uid %u and every capability kept, no seccomp filter",
                getuid());
    return true;
  }
  if (!switch_to_sandbox_user(cfg)) return false;
  std::vector<int> keep(std::begin(kDaemonCapabilities), std::end(kDaemonCapabilities));
  if (cfg.listen_port < 1024) keep.push_back(CAP_NET_BIND_SERVICE);
  Result<CapabilityReport> caps = restrict_capabilities(keep);
  if (!caps) {
    LW_LOG_ERROR("sandbox: %s", caps.error().message.c_str());
    return false;
  }
  const std::string& name = daemon_user_name();
  LW_LOG_INFO("sandbox: uid %u%s%s%s, gid %u; capabilities kept: %s; dropped: %s%s", getuid(),
              name.empty() ? "" : " (", name.c_str(), name.empty() ? "" : ")", getgid(),
              capability_list(caps->kept).c_str(),
              capability_list(caps->dropped).c_str(),
              caps->bounding_set_restricted ? "; bounding set restricted" : "");
  // The seccomp filter will kill execve: debuginfod fetches (when
  // configured, now or after a reload) run from a spawner forked now,
  // while the daemon is one thread (core/symbols/debuginfod.h).
  if (Status st = start_debuginfod_spawner(); !st)
    LW_LOG_WARN("%s: debuginfod fetches will fail under the sandbox", st.error().message.c_str());
  return true;
}

// The web config at `web_path` into `web` (left null for ""). False (logged)
// when it is invalid: a startup error, before anything is attached.
bool load_daemon_web_config(const std::string& web_path, std::shared_ptr<const WebConfig>& web) {
  if (web_path.empty()) return true;
  std::vector<ConfigError> web_errors;
  Result<WebConfig> loaded = load_web_config(web_path, &web_errors);
  if (!loaded) {
    for (const ConfigError& e : web_errors) LW_LOG_ERROR("%s", format_error(e).c_str());
    return false;
  }
  web = std::make_shared<const WebConfig>(std::move(*loaded));
  LW_LOG_INFO("web config %s: %s, %s", web_path.c_str(), web->tls ? "TLS" : "plain HTTP",
              web->users.empty() ? "no authentication" : "basic auth");
  return true;
}

void install_daemon_signal_handlers() {
  struct sigaction stop = {}, hup = {}, usr2 = {};
  stop.sa_sigaction = on_stop;
  hup.sa_sigaction = on_hup;
  usr2.sa_sigaction = on_usr2;
  stop.sa_flags = hup.sa_flags = usr2.sa_flags = SA_SIGINFO;
  sigaction(SIGUSR2, &usr2, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGHUP, &hup, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Called by Daemon::run once the daemon has started: binds the HTTP front,
// then installs the seccomp filter and tells systemd it is ready. False
// (logged) when either fails; the caller then stops the daemon.
bool serve_when_ready(HttpServer& http, const std::string& host, int port, bool sandbox) {
  Result<int> bound = http.start(host, port);
  if (!bound) {
    LW_LOG_ERROR("%s", bound.error().message.c_str());
    return false;
  }
  LW_LOG_INFO("listening on %s:%d", host.c_str(), *bound);
  // Everything the daemon opens, binds and loads at start is done: from
  // here on, only the system calls on the list (core/platform/sandbox.h).
  if (sandbox && !kSeccompInThisBuild) {
    LW_LOG_WARN("sandbox: no seccomp filter in a sanitizer build (its runtime needs ptrace)");
  } else if (sandbox) {
    Result<size_t> rules = install_seccomp();
    if (!rules) {
      LW_LOG_ERROR("sandbox: %s", rules.error().message.c_str());
      return false;
    }
    LW_LOG_INFO("sandbox: no_new_privs set, seccomp filter installed (%zu rules)", *rules);
  }
  sd_notify_send("READY=1");
  return true;
}

}  // namespace

int run_check_config(int argc, char** argv) {
  enum { kOptWebConfig = 256 };
  static const struct option kLong[] = {
      {"help", no_argument, nullptr, 'h'},
      {"web.config.file", required_argument, nullptr, kOptWebConfig},
      {nullptr, 0, nullptr, 0},
  };
  // FILE, then optionally the web config as `run` takes it.
  std::optional<std::string> web_config_flag;
  reset_getopt();
  int c;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    if (c == 'h') {
      check_config_usage(stdout);
      return exit_code::kOk;
    }
    if (c == kOptWebConfig) {
      web_config_flag = optarg;
      continue;
    }
    report_bad_option("check-config", c, argv);
    check_config_usage(stderr);
    return exit_code::kUsage;
  }
  if (argc - optind != 1) {
    fprintf(stderr, "leakwatch check-config: %s\n", argc - optind < 1 ? "FILE is required" : "one FILE only");
    check_config_usage(stderr);
    return exit_code::kUsage;
  }
  const char* path = argv[optind];
  std::vector<ConfigError> errors;
  Result<Config> cfg = load_config_file(path, &errors);
  // The web config `run` would load is checked too: a unit's
  // ExecStartPre=check-config must fail exactly when ExecStart=run would.
  const std::string web_path = web_config_flag.value_or(cfg ? cfg->web_config_file : std::string());
  std::optional<WebConfig> web;
  if (!web_path.empty()) {
    Result<WebConfig> loaded = load_web_config(web_path, &errors);
    if (loaded) web = std::move(*loaded);
  }
  // The account `run` would switch to, on this host, when run as root
  // (decision unprivileged-uid); under another uid it is not used.
  if (cfg && cfg->sandbox && cfg->sandbox_user != "root" && running_as_root()) {
    if (Result<DaemonUser> user = find_user(cfg->sandbox_user); !user)
      errors.push_back({path, 0, 0, "sandbox_user: " + user.error().message, ""});
  }
  if (!errors.empty()) {
    for (const ConfigError& e : errors) fprintf(stderr, "%s\n", format_error(e).c_str());
    fprintf(stderr, "%s: %zu error%s\n", path, errors.size(), errors.size() == 1 ? "" : "s");
    return exit_code::kError;
  }
  std::string web_summary;
  if (web) {
    web_summary = ", web config " + web_path + ": " +
                  (web->tls ? std::string("TLS, client certificates ") + client_auth_name(web->tls->client_auth)
                            : std::string("plain HTTP")) +
                  (web->users.empty() ? ", no basic auth" : ", basic auth") +
                  (web->rate_limit.interval_ms ? ", rate limited" : "");
  }
  printf("%s: valid (%zu targets, listen %s%s)\n", path, cfg->targets.size(), cfg->listen.c_str(),
         web_summary.c_str());
  return exit_code::kOk;
}

int run_daemon(int argc, char** argv) {
  RunFlags flags;
  if (int rc = parse_run_flags(argc, argv, flags); rc >= 0) return rc;
  // docs/cli.md, "Benchmark switches": `run` takes only the live map's and
  // the uprobe sessions'.
  const BenchSwitches bench = read_bench_switches();
  flags.options.bench_live_prealloc = bench.live_prealloc;
  flags.options.bench_uprobe_sessions = bench.uprobe_sessions;
  const DaemonOptions& options = flags.options;
  std::optional<Config> cfg = load_daemon_config(options);
  if (!cfg) return exit_code::kError;
  set_log_level(options.log_level_override.value_or(cfg->log_level));
  set_log_format(options.log_format_override.value_or(cfg->log_format));
  if (!raise_fd_limit()) LW_LOG_WARN("cannot raise RLIMIT_NOFILE: %s", strerror(errno));
  // Before any thread starts, so every thread inherits it.
  const bool sandbox = cfg->sandbox;
  if (!restrict_daemon_capabilities(*cfg)) return exit_code::kError;
  // Before anything is attached: a bad web config is a startup error.
  std::shared_ptr<const WebConfig> web;
  const std::string web_path = flags.web_config_flag.value_or(cfg->web_config_file);
  if (!load_daemon_web_config(web_path, web)) return exit_code::kError;

  std::string host = cfg->listen_host;
  int port = cfg->listen_port;
  size_t max_series = cfg->limits.max_series;
  auto daemon = Daemon::create(options, std::move(*cfg));
  if (!daemon) {
    LW_LOG_ERROR("%s", daemon.error().message.c_str());
    return exit_code_for(daemon.error());
  }
  Daemon& d = **daemon;
  g_daemon.store(&d);
  install_daemon_signal_handlers();

  HttpServerOptions http_options;
  http_options.max_series = max_series;
  http_options.web = web;
  http_options.web_config_path = web_path;  // re-read when it changes
  HttpServer http([&d] { return d.snapshot(); }, std::move(http_options));
  bool http_failed = false;
  Status st = d.run([&] {
    if (serve_when_ready(http, host, port, sandbox)) return;
    http_failed = true;
    d.request_stop();
  });
  http.stop();
  g_daemon.store(nullptr);
  if (!st) {
    LW_LOG_ERROR("%s", st.error().message.c_str());
    return exit_code::kError;
  }
  return http_failed ? exit_code::kError : exit_code::kOk;
}

}  // namespace lw
