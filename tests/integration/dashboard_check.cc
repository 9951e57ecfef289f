// SPDX-License-Identifier: Apache-2.0
#include "dashboard_check.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <regex>
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
  // Annotation queries (the OOM kills) run against the same Prometheus.
  if (dashboard.contains("annotations"))
    for (const Json &a : dashboard.at("annotations").value("list", Json::array()))
      if (a.contains("expr"))
        out.push_back(
            {0, "annotation: " + a.value("name", std::string()), "annotation", a.at("expr").get<std::string>(), true});
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
  for (size_t at = out.find('$'); at != std::string::npos; at = out.find('$', at + 1)) {
    if (at + 1 < out.size() && std::isdigit(static_cast<unsigned char>(out[at + 1]))) continue;  // $1
    throw std::runtime_error("unsubstituted variable at '" + out.substr(at, 24) + "' in: " + expr);
  }
  return out;
}

namespace {

// A JavaScript regex body with named groups as std::regex (ECMAScript, no
// named groups) reads it: `(?<name>` becomes `(`, and the group numbers of
// the names are returned.
std::string unname_groups(const std::string &js, std::map<std::string, size_t> &groups) {
  std::string out;
  size_t index = 0;
  for (size_t i = 0; i < js.size(); ++i) {
    const char c = js[i];
    if (c == '\\' && i + 1 < js.size()) {
      out += js.substr(i, 2);
      ++i;
      continue;
    }
    if (c == '(') {
      if (js.compare(i, 3, "(?<") == 0 && i + 3 < js.size() && js[i + 3] != '=' && js[i + 3] != '!') {
        const size_t close = js.find('>', i);
        groups[js.substr(i + 3, close - i - 3)] = ++index;
        out += '(';
        i = close;
        continue;
      }
      if (js.compare(i, 2, "(?") != 0) ++index;
    }
    out += c;
  }
  return out;
}

const Json &variable_named(const Json &dashboard, const std::string &name) {
  for (const Json &v : dashboard.at("templating").at("list"))
    if (v.value("name", "") == name) return v;
  throw std::runtime_error("dashboard has no variable " + name);
}

}  // namespace

std::vector<VariableOption> variable_options(PrometheusServer &prometheus, const Json &dashboard,
                                             const std::string &name,
                                             const std::map<std::string, std::string> &vars, double unix_time) {
  const Json &variable = variable_named(dashboard, name);
  if (variable.value("type", "") != "query") throw std::runtime_error(name + " is not a query variable");
  const Json &q = variable.at("query");
  const std::string query = substitute_variables(q.is_object() ? q.at("query").get<std::string>() : q.get<std::string>(), vars);

  std::vector<std::string> lines;
  std::smatch m;
  if (std::regex_match(query, m, std::regex(R"(label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\))"))) {
    const std::string label = m[2];
    const Json data = prometheus.query("count by (" + label + ") (" + m[1].str() + ")", unix_time);
    for (const Json &series : data.at("result")) lines.push_back(series.at("metric").value(label, ""));
  } else if (std::regex_match(query, m, std::regex(R"(query_result\(([\s\S]*)\))"))) {
    const Json data = prometheus.query(m[1], unix_time);
    for (const Json &series : data.at("result")) {
      Json metric = series.at("metric");
      std::string line = metric.value("__name__", "");
      metric.erase("__name__");
      std::string labels;
      for (const auto &[key, value] : metric.items())  // nlohmann keeps keys sorted: Prometheus' order
        labels += (labels.empty() ? "" : ",") + key + "=\"" + value.get<std::string>() + "\"";
      const Json &sample = series.at("value");
      line += "{" + labels + "} " + sample.at(1).get<std::string>() + " " +
              std::to_string(std::llround(sample.at(0).get<double>() * 1000));
      lines.push_back(line);
    }
  } else {
    throw std::runtime_error(name + ": neither label_values() nor query_result(): " + query);
  }

  std::map<std::string, size_t> groups;
  std::optional<std::regex> regex;
  const std::string js = variable.value("regex", "");
  if (!js.empty()) {
    const size_t last = js.rfind('/');
    if (js.front() != '/' || last == 0) throw std::runtime_error(name + ": regex is not /.../: " + js);
    regex.emplace(unname_groups(js.substr(1, last - 1), groups), std::regex::ECMAScript);
  }
  std::vector<VariableOption> options;
  std::set<std::string> values;
  for (const std::string &line : lines) {
    VariableOption option{line, line};
    if (regex) {
      std::smatch found;
      if (!std::regex_search(line, found, *regex)) continue;
      if (groups.count("value") || groups.count("text")) {
        option.value = groups.count("value") ? found[groups.at("value")].str() : found[groups.at("text")].str();
        option.text = groups.count("text") ? found[groups.at("text")].str() : option.value;
      } else {
        option.value = option.text = found.size() > 1 ? found[1].str() : found[0].str();
      }
    }
    if (values.insert(option.value).second) options.push_back(option);
  }
  return options;
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
    std::string promql = substitute_variables(q.expr, vars);
    Json data = prometheus.query(promql, unix_time);  // throws on invalid PromQL
    if (q.event) {
      // No event in this run: the query without its final "> 0" filter
      // must see the counter's series (exported at 0 from the start).
      const size_t filter = promql.rfind(" > 0");
      if (filter == std::string::npos || filter + 4 != promql.size()) {
        check.failures.push_back(where + ": an annotation query must end with \" > 0\": " + q.expr);
        continue;
      }
      promql.resize(filter);
      data = prometheus.query(promql, unix_time);
    }
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
