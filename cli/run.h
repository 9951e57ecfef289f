/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

namespace lw {
// `leakwatch run --config FILE`: the daemon. Returns the exit code.
int run_daemon(int argc, char** argv);
// `leakwatch check-config FILE`: 0 when valid, 1 with every error listed.
int run_check_config(int argc, char** argv);
// `leakwatch snapshot -p PID -o FILE.pb.gz`: a pprof heap profile, no daemon.
int run_snapshot(int argc, char** argv);
// `leakwatch test [options] -- PROG ARGS`: the leak gate (cli/test_cmd.cc).
int run_test(int argc, char** argv);
}  // namespace lw
