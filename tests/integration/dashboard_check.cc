// SPDX-License-Identifier: Apache-2.0
#include "dashboard_check.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace lw::itest {

namespace {

void collect(const Json &panels, std::vector<DashboardQuery> &out) {
  for (const Json &panel : panels) {
    const std::string type = panel.value("type", "");
    if (type == "row") {
      if (panel.contains("panels")) collect(panel.at("panels"), out);
      continue;
    }
    const int id = panel.at("id").get<int>();
    const std::string title = panel.value("title", "");
    if (!panel.contains("targets") || panel.at("targets").empty())
      throw std::runtime_error("dashboard panel " + std::to_string(id) + " '" + title + "' has no query");
    for (const Json &target : panel.at("targets")) {
      const std::string expr = target.value("expr", "");
      if (expr.empty())
        throw std::runtime_error("dashboard panel " + std::to_string(id) + " '" + title + "' has a target without expr");
      out.push_back({id, title, target.value("refId", ""), expr});
    }
  }
}

}  // namespace

std::vector<DashboardQuery> dashboard_queries(const Json &dashboard) {
  std::vector<DashboardQuery> out;
  collect(dashboard.at("panels"), out);
  return out;
}

std::set<std::string> dashboard_variables(const Json &dashboard) {
  std::set<std::string> names;
  for (const Json &v : dashboard.at("templating").at("list"))
    if (v.value("type", "") != "datasource") names.insert(v.at("name").get<std::string>());
  return names;
}

std::string substitute_variables(const std::string &expr, const std::map<std::string, std::string> &vars) {
  std::vector<std::pair<std::string, std::string>> ordered(vars.begin(), vars.end());
  std::sort(ordered.begin(), ordered.end(),
            [](const auto &a, const auto &b) { return a.first.size() > b.first.size(); });
  std::string out = expr;
  for (const auto &[name, value] : ordered) {
    for (const std::string &token : {"${" + name + "}", "$" + name}) {
      for (size_t at = out.find(token); at != std::string::npos; at = out.find(token, at + value.size()))
        out.replace(at, token.size(), value);
    }
  }
  if (size_t at = out.find('$'); at != std::string::npos)
    throw std::runtime_error("unsubstituted variable at '" + out.substr(at, 24) + "' in: " + expr);
  return out;
}

DashboardCheck check_dashboard(PrometheusServer &prometheus, const Json &dashboard,
                               const std::map<std::string, std::string> &vars, double unix_time,
                               const std::map<std::string, PanelRefs> &pending) {
  DashboardCheck check;
  std::ostringstream report;
  for (const DashboardQuery &q : dashboard_queries(dashboard)) {
    ++check.queries;
    const std::string where = "panel " + std::to_string(q.panel_id) + " '" + q.panel_title + "' query " + q.ref_id;
    std::string waiting_for;
    for (const auto &[reason, refs] : pending)
      if (refs.count({q.panel_id, q.ref_id})) waiting_for = reason;
    if (q.expr.find("leakwatch_") == std::string::npos) {
      check.failures.push_back(where + ": names no leakwatch_ metric: " + q.expr);
      continue;
    }
    const std::string promql = substitute_variables(q.expr, vars);
    const Json data = prometheus.query(promql, unix_time);  // throws on invalid PromQL
    const size_t series = data.at("result").size();
    if (series > 0) ++check.returned_data;
    report << "  " << where << ": " << series << " series" << (waiting_for.empty() ? "" : " (pending: " + waiting_for + ")")
           << "\n";
    if (!waiting_for.empty()) {
      ++check.pending;
      if (series > 0)
        check.failures.push_back(where + " returns data now: remove it from the list waiting for " + waiting_for);
      continue;
    }
    if (series == 0) check.failures.push_back(where + ": no data for: " + promql);
  }
  check.report = report.str();
  return check;
}

}  // namespace lw::itest
