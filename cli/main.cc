// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/exit_codes.h"
#include "cli/run.h"
#include "cli/top.h"

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: leakwatch <command> [options]\n"
          "\n"
          "commands:\n"
          "  top -p PID [--interval SECONDS] [--count N] [--json]\n"
          "                       live view of the call stacks holding memory in a running\n"
          "                       process (attaches without a restart)\n"
          "  run --config FILE    the daemon: trace every process the config selects\n"
          "  check-config FILE    validate a config file (every error, with file:line:column)\n"
          "  snapshot -p PID [--duration SECONDS] -o FILE.pb.gz\n"
          "                       write a pprof heap profile of a running process\n"
          "  --version            print the version\n"
          "  --help               this text\n"
          "\n"
          "Run `leakwatch top --help` for all options. Exit codes: 0 ok, 1 error, 2 usage,\n"
          "3 no such process, 4 permission denied, 5 kernel unsupported.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return lw::exit_code::kUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    printf("leakwatch %s\n", LEAKWATCH_VERSION);
    return lw::exit_code::kOk;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return lw::exit_code::kOk;
  }
  if (cmd == "top") return lw::run_top(argc - 1, argv + 1);
  if (cmd == "run") return lw::run_daemon(argc - 1, argv + 1);
  if (cmd == "check-config") return lw::run_check_config(argc - 1, argv + 1);
  if (cmd == "snapshot") return lw::run_snapshot(argc - 1, argv + 1);
  fprintf(stderr, "leakwatch: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return lw::exit_code::kUsage;
}
