// SPDX-License-Identifier: Apache-2.0
#include "cli/run.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/exit_codes.h"
#include "core/config.h"
#include "core/log.h"
#include "core/sd_notify.h"
#include "service/daemon.h"
#include "exporter/http_server.h"
#include "exporter/web_config.h"

namespace lw {

namespace {

std::atomic<Daemon*> g_daemon{nullptr};

void on_stop(int) {
  if (Daemon* d = g_daemon.load()) d->request_stop();
}
void on_hup(int) {
  if (Daemon* d = g_daemon.load()) d->request_reload();
}
void on_usr2(int) {
  if (Daemon* d = g_daemon.load()) d->request_kill_switch_toggle();
}

std::optional<LogLevel> parse_level(const std::string& s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  return std::nullopt;
}

}  // namespace

int run_check_config(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: leakwatch check-config FILE\n");
    return exit_code::kUsage;
  }
  std::vector<ConfigError> errors;
  Result<Config> cfg = load_config_file(argv[1], &errors);
  if (!cfg) {
    for (const ConfigError& e : errors) fprintf(stderr, "%s\n", format_error(e).c_str());
    fprintf(stderr, "%s: %zu error%s\n", argv[1], errors.size(), errors.size() == 1 ? "" : "s");
    return exit_code::kError;
  }
  printf("%s: valid (%zu targets, listen %s)\n", argv[1], cfg->targets.size(), cfg->listen.c_str());
  return exit_code::kOk;
}

int run_daemon(int argc, char** argv) {
  DaemonOptions options;
  // Overrides the config's web_config_file; "" turns TLS and auth off.
  std::optional<std::string> web_config_flag;
  constexpr std::string_view kWebConfigEq = "--web.config.file=";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--config" || a == "-c") && i + 1 < argc) {
      options.config_path = argv[++i];
    } else if (a == "--web.config.file" && i + 1 < argc) {
      web_config_flag = argv[++i];
    } else if (a.starts_with(kWebConfigEq)) {
      // Prometheus exporters' flags (kingpin) are usually written this way.
      web_config_flag = a.substr(kWebConfigEq.size());
    } else if (a == "--log-level" && i + 1 < argc) {
      options.log_level_override = parse_level(argv[++i]);
      if (!options.log_level_override) {
        fprintf(stderr, "leakwatch run: --log-level must be debug, info, warn or error\n");
        return exit_code::kUsage;
      }
    } else if (a == "--pods-dir" && i + 1 < argc) {
      options.pods.root = argv[++i];
    } else if (a == "-h" || a == "--help") {
      printf("usage: leakwatch run [--config FILE] [--log-level LEVEL] [--pods-dir DIR]\n"
             "                     [--web.config.file FILE]\n");
      return exit_code::kOk;
    } else {
      fprintf(stderr, "leakwatch run: unknown option '%s'\n", a.c_str());
      return exit_code::kUsage;
    }
  }
  std::vector<ConfigError> errors;
  // Without --config: every process on the host in `auto` mode (light,
  // escalated while growing), all other keys at their defaults.
  Result<Config> cfg = options.config_path.empty() ? Result<Config>(default_daemon_config())
                                                   : load_config_file(options.config_path, &errors);
  if (options.config_path.empty())
    LW_LOG_INFO("no --config: watching every process in auto mode (built-in default)");
  if (!cfg) {
    for (const ConfigError& e : errors) LW_LOG_ERROR("%s", format_error(e).c_str());
    return exit_code::kError;
  }
  set_log_level(options.log_level_override.value_or(cfg->log_level));
  if (!raise_fd_limit()) LW_LOG_WARN("cannot raise RLIMIT_NOFILE: %s", strerror(errno));

  // Before anything is attached: a bad web config is a startup error.
  std::shared_ptr<const WebConfig> web;
  const std::string web_path = web_config_flag.value_or(cfg->web_config_file);
  if (!web_path.empty()) {
    std::vector<ConfigError> web_errors;
    Result<WebConfig> loaded = load_web_config(web_path, &web_errors);
    if (!loaded) {
      for (const ConfigError& e : web_errors) LW_LOG_ERROR("%s", format_error(e).c_str());
      return exit_code::kError;
    }
    web = std::make_shared<const WebConfig>(std::move(*loaded));
    LW_LOG_INFO("web config %s: %s, %s", web_path.c_str(), web->tls ? "TLS" : "plain HTTP",
                web->users.empty() ? "no authentication" : "basic auth");
  }

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
  struct sigaction stop = {}, hup = {}, usr2 = {};
  stop.sa_handler = on_stop;
  hup.sa_handler = on_hup;
  usr2.sa_handler = on_usr2;
  sigaction(SIGUSR2, &usr2, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGHUP, &hup, nullptr);
  signal(SIGPIPE, SIG_IGN);

  HttpServer http([&d] { return d.snapshot(); }, max_series, web);
  bool http_failed = false;
  Status st = d.run([&] {
    Result<int> bound = http.start(host, port);
    if (!bound) {
      LW_LOG_ERROR("%s", bound.error().message.c_str());
      http_failed = true;
      d.request_stop();
      return;
    }
    LW_LOG_INFO("listening on %s:%d", host.c_str(), *bound);
    sd_notify_send("READY=1");
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
