/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

namespace lw {
// `leakwatch top -p PID ...`. Returns the process exit code (docs/cli.md).
int run_top(int argc, char** argv);
}  // namespace lw
