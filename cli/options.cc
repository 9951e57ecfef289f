// SPDX-License-Identifier: Apache-2.0
#include "cli/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace lw {

bool parse_u64(const char* s, uint64_t& out) {
  if (!s || !*s || s[0] < '0' || s[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return false;
  out = v;
  return true;
}

bool parse_number(const char* s, double lo, double hi, double& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !std::isfinite(v) || v < lo || v > hi) return false;
  out = v;
  return true;
}

std::optional<LogLevel> parse_log_level(const char* s) {
  if (!s) return std::nullopt;
  if (strcmp(s, "debug") == 0) return LogLevel::kDebug;
  if (strcmp(s, "info") == 0) return LogLevel::kInfo;
  if (strcmp(s, "warn") == 0) return LogLevel::kWarn;
  if (strcmp(s, "error") == 0) return LogLevel::kError;
  return std::nullopt;
}

void reset_getopt() {
  // 0, not 1: glibc then also resets its internal state (permutation, the
  // position inside a group of short options).
  optind = 0;
  opterr = 0;
}

void report_bad_option(const char* command_name, int c, char** argv) {
  // optind has moved past the offending word.
  const char* word = optind > 0 ? argv[optind - 1] : "";
  const std::string spaced = *command_name ? std::string(" ") + command_name : std::string();
  const char* command = spaced.c_str();
  if (c == ':') {
    if (optopt > 0 && optopt < 256 && word[0] == '-' && word[1] == optopt)
      fprintf(stderr, "leakwatch%s: option '-%c' needs a value\n", command, optopt);
    else
      fprintf(stderr, "leakwatch%s: option '%s' needs a value\n", command, word);
  } else if (optopt != 0 && word[0] == '-' && word[1] == '-') {
    // A known long option that takes no value, given one (--json=yes).
    const std::string name(word, strcspn(word, "="));
    fprintf(stderr, "leakwatch%s: option '%s' takes no value\n", command, name.c_str());
  } else if (optopt > 0 && optopt < 256 && !(word[0] == '-' && word[1] == '-')) {
    fprintf(stderr, "leakwatch%s: unknown option '-%c'\n", command, optopt);
  } else {
    fprintf(stderr, "leakwatch%s: unknown option '%s'\n", command, word);
  }
}

}  // namespace lw
