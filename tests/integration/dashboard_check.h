/* SPDX-License-Identifier: Apache-2.0 */
// Runs every panel query of the Grafana dashboard (deploy/grafana/
// leakwatch.json) against a real Prometheus that scraped leakwatch, with
// the dashboard's template variables substituted as Grafana would.
#pragma once

#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "prometheus_harness.h"

namespace lw::itest {

struct DashboardQuery {
  int panel_id = 0;
  std::string panel_title;
  std::string ref_id;
  std::string expr;  // as in the JSON, variables not substituted
  // An annotation's query (OOM kills): it marks events, so it is empty in a
  // run without one; its counter's series must exist all the same.
  bool event = false;
};

// Every target of every panel (panels nested in collapsed rows included).
// Throws if a non-row panel has no target or a target has no expr.
std::vector<DashboardQuery> dashboard_queries(const Json &dashboard);

// The template variables the dashboard declares ($datasource excepted:
// no query names it).
std::set<std::string> dashboard_variables(const Json &dashboard);

// Replaces $name and ${name} for each entry of `vars` (longest names first,
// so $pid never eats into $pidx). Throws on a `$` left over that names no
// variable given ($1, a regex back-reference in label_replace, is kept).
std::string substitute_variables(const std::string &expr, const std::map<std::string, std::string> &vars);

struct VariableOption {
  std::string text;   // what the picker shows
  std::string value;  // what $name becomes in queries
  bool operator==(const VariableOption &) const = default;
};
// For GoogleTest's messages.
inline void PrintTo(const VariableOption &option, std::ostream *out) {
  *out << "'" << option.text << "'=" << option.value;
}

// The options of the dashboard's query variable `name` as Grafana's
// Prometheus data source makes them at `unix_time`: label_values(SELECTOR,
// LABEL) gives the LABEL values of SELECTOR's series; query_result(EXPR)
// gives one line per series of EXPR, `name{label="value",...} value ts_ms`
// (labels in Prometheus' order, joined by ","), which the variable's regex
// (/.../, named groups `text` and `value`, else its first group) turns into
// options; duplicate values are dropped, as Grafana does. Variables in the
// query are substituted from `vars` first. Throws on other queries.
std::vector<VariableOption> variable_options(PrometheusServer &prometheus, const Json &dashboard,
                                             const std::string &name,
                                             const std::map<std::string, std::string> &vars, double unix_time);

// (panel id, refId) of queries whose metrics are not on this branch yet.
using PanelRefs = std::set<std::pair<int, std::string>>;

struct DashboardCheck {
  int queries = 0;
  int returned_data = 0;
  int pending = 0;
  std::vector<std::string> failures;  // one line per query that failed the check
  std::string report;                 // one line per query, for the log
};

// Runs each query at `unix_time`. A query must name a leakwatch_ metric
// and return at least one series; one listed in `pending` (with the reason
// it waits for) must be valid PromQL and is reported, and it fails once it
// returns data, so that the list is emptied when its metrics arrive.
DashboardCheck check_dashboard(PrometheusServer &prometheus, const Json &dashboard,
                               const std::map<std::string, std::string> &vars, double unix_time,
                               const std::map<std::string, PanelRefs> &pending);

}  // namespace lw::itest
