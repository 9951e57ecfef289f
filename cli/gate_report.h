// SPDX-License-Identifier: Apache-2.0
// What `leakwatch test` says about a run (docs/cli.md, `leakwatch test`):
// the text report on stderr, its JSON file, and the exit code that combines
// the program's own status with the gate's verdict (cli/gate.h).
// Thread-safety: plain functions; no shared state.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/gate.h"

namespace lw::gate {

// How the run ended, for the report and the exit code.
struct RunEnd {
  std::string program;           // argv[0] as given
  std::optional<int> wait_status;  // the program's, once reaped
  bool interrupted = false;      // leakwatch got SIGINT/SIGTERM and ended it
  int gate_failure_code = 0;     // --error-exitcode
  // Processes the program forked: not traced (docs/cli.md, `leakwatch
  // test`, Limits), so their memory is not in the verdict; said, not silent.
  uint64_t children_untraced = 0;
};

// The exit code of `leakwatch test`: the gate's failure code when the gate
// fails; otherwise the program's own code (exit status, or 128 + signal
// number when a signal ended it, as a shell reports it); exit_code::kError
// when its status is unknown.
int run_exit_code(const Verdict& verdict, const RunEnd& end);

// The text report, lines ending in '\n': a summary, every failing site with
// its whole stack, then up to `others` more sites (passing, suppressed)
// with their leaf frame, and the verdict.
std::string text_report(const Verdict& verdict, const Rules& rules, const RunEnd& end, size_t others);

// The verdict as JSON (the "gate" object of --json's file; docs/cli.md).
nlohmann::json verdict_json(const Verdict& verdict, const Rules& rules, const RunEnd& end);

}  // namespace lw::gate
