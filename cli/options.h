// SPDX-License-Identifier: Apache-2.0
// Helpers for the commands' getopt_long parsing (docs/cli.md, "Options,
// every command"): value parsers and one way to report a bad option.
// Thread-safety: getopt_long's state is global; parse on the main thread.
#pragma once

#include <getopt.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/config/config.h"

namespace lw {

// A decimal integer without sign or trailing text.
bool parse_u64(const char* s, uint64_t& out);
// A finite decimal number in [lo, hi].
bool parse_number(const char* s, double lo, double hi, double& out);
// debug, info, warn, error.
std::optional<LogLevel> parse_log_level(const char* s);

// Resets getopt_long for a new argv (every command parses its own).
void reset_getopt();

// What getopt_long returned for a bad option ('?' unknown, ':' missing
// value), as "leakwatch CMD: unknown option '--x'" on stderr.
void report_bad_option(const char* command, int c, char** argv);

}  // namespace lw
