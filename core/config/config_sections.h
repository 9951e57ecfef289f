// SPDX-License-Identifier: Apache-2.0
// The config's sections parsed in files of their own (core/config/config.cc
// parses the document and the small sections). Errors go to the sink, in
// document order. Thread-safety: free functions.
#pragma once

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/yaml_support.h"

namespace lw::config_sections {

// `targets`: a sequence of named targets (core/config/config_targets.cc).
void parse_targets(yaml_support::ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::vector<TargetConfig>& out);
// `exclude`: processes never traced, matched as targets are.
void parse_exclude(yaml_support::ErrorSink& errors, const YAML::Node& node, const std::string& path,
                   std::vector<ExcludeConfig>& out);

}  // namespace lw::config_sections
