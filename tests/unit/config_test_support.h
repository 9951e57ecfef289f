// SPDX-License-Identifier: Apache-2.0
// Parsing helpers the config unit tests share (test_config.cc,
// test_config_sections.cc).
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace lw::config_test {

inline std::string all_errors(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const ConfigError& e : errors) out += format_error(e) + "\n";
  return out;
}

// Parses text that must be valid.
inline Config parse_ok(const std::string& text) {
  std::vector<ConfigError> errors;
  Result<Config> r = parse_config(text, "t.yaml", &errors);
  EXPECT_TRUE(r.ok()) << all_errors(errors);
  EXPECT_TRUE(errors.empty()) << all_errors(errors);
  return r.ok() ? std::move(r).value() : Config{};
}

// Parses text that must be invalid; returns its errors.
inline std::vector<ConfigError> parse_bad(const std::string& text) {
  std::vector<ConfigError> errors;
  Result<Config> r = parse_config(text, "t.yaml", &errors);
  EXPECT_FALSE(r.ok());
  if (!r.ok()) {
    EXPECT_EQ(r.error().code, EINVAL);
  }
  EXPECT_FALSE(errors.empty());
  return errors;
}

}  // namespace lw::config_test
