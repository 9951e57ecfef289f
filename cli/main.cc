// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/exit_codes.h"
#include "cli/options.h"
#include "cli/run.h"
#include "cli/top.h"
#include "core/symbols/debuginfod.h"

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch <command> [options]\n"
          "\n"
          "commands:\n"
          "  top -p PID [--interval SECONDS] [--count N] [--json]\n"
          "                       live view of the call stacks holding memory in a running\n"
          "                       process (attaches without a restart)\n"
          "  top -c 'PROG ARGS'   start PROG and trace it from its first instruction\n"
          "  run [--config FILE]  the daemon: trace every process the config selects\n"
          "  check-config FILE    validate a config file (every error, with file:line:column)\n"
          "  snapshot -p PID [--duration SECONDS] -o FILE.pb.gz\n"
          "                       write a pprof heap profile of a running process\n"
          "  test [options] -- PROG ARGS\n"
          "                       run PROG traced from its first instruction and fail\n"
          "                       (exit 23) on the sites still holding memory at its exit\n"
          "\n"
          "global options:\n"
          "  -V, --version        print the version\n"
          "  -h, --help           this text\n"
          "\n"
          "Run `leakwatch COMMAND --help` (or `leakwatch help COMMAND`) for a command's\n"
          "options. Exit codes: 0 ok, 1 error, 2 usage, 3 no such process, 4 permission\n"
          "denied, 5 kernel unsupported; `test`: 23 leaks found, else the program's own.\n");
}

// A command's entry point, or null for an unknown command.
using CommandMain = int (*)(int, char**);
CommandMain command_main(const std::string& cmd) {
  if (cmd == "top") return lw::run_top;
  if (cmd == "run") return lw::run_daemon;
  if (cmd == "check-config") return lw::run_check_config;
  if (cmd == "snapshot") return lw::run_snapshot;
  if (cmd == "test") return lw::run_test;
  return nullptr;
}

// `leakwatch help [COMMAND]`: the global help, or COMMAND --help.
int help(int argc, char** argv) {
  if (argc < 2) {
    usage(stdout);
    return lw::exit_code::kOk;
  }
  CommandMain command = command_main(argv[1]);
  if (!command) {
    fprintf(stderr, "leakwatch help: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return lw::exit_code::kUsage;
  }
  char help_flag[] = "--help";
  char* sub_argv[] = {argv[1], help_flag, nullptr};
  return command(2, sub_argv);
}

}  // namespace

int main(int argc, char** argv) {
  static const struct option kLong[] = {
      {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'V'},
      {nullptr, 0, nullptr, 0},
  };
  lw::reset_getopt();
  int c;
  // "+": stop at the command; its options are its own.
  while ((c = getopt_long(argc, argv, "+:hV", kLong, nullptr)) != -1) {
    switch (c) {
      case 'h':
        usage(stdout);
        return lw::exit_code::kOk;
      case 'V':
        printf("leakwatch %s\n", LEAKWATCH_VERSION);
        return lw::exit_code::kOk;
      default:
        lw::report_bad_option("", c, argv);
        usage(stderr);
        return lw::exit_code::kUsage;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return lw::exit_code::kUsage;
  }
  const std::string cmd = argv[optind];
  const int sub_argc = argc - optind;
  char** sub_argv = argv + optind;
  if (cmd == "version") {
    printf("leakwatch %s\n", LEAKWATCH_VERSION);
    return lw::exit_code::kOk;
  }
  if (cmd == "help") return help(sub_argc, sub_argv);
  if (CommandMain command = command_main(cmd)) return command(sub_argc, sub_argv);
  // Internal: the debuginfod fetch child (core/symbols/debuginfod.h), not for users.
  if (cmd == "debuginfod-fetch") return lw::debuginfod_fetch_main(sub_argc, sub_argv);
  fprintf(stderr, "leakwatch: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return lw::exit_code::kUsage;
}
