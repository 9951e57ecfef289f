/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <cstdio>

namespace lw {
// `leakwatch top -p PID ...`. Returns the process exit code (docs/cli.md).
int run_top(int argc, char** argv);
// Its help text (cli/top_usage.cc).
void top_usage(FILE* out);
}  // namespace lw
