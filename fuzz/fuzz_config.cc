// SPDX-License-Identifier: Apache-2.0
// Fuzzes the config parser (YAML via yaml-cpp, then validation). Any input
// must give a Config or errors with a location, never a crash, a hang or an
// exception; every error names the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<lw::ConfigError> errors;
  lw::Result<lw::Config> config = lw::parse_config(text, "fuzz.yaml", &errors);
  if (!config && errors.empty()) abort();
  if (config && !errors.empty()) abort();
  for (const lw::ConfigError& e : errors) {
    if (e.file != "fuzz.yaml" || e.line < 0 || e.column < 0) abort();
    if (lw::format_error(e).empty()) abort();
  }
  return 0;
}
