// SPDX-License-Identifier: Apache-2.0
#include "prometheus_harness.h"

#include <sys/wait.h>

#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace lw::itest {
namespace {

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error(what); }

void write_file(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail("writing " + path);
}

// Prometheus's API takes times as unix seconds; milliseconds are its
// resolution.
std::string format_time(double unix_time) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f", unix_time);
  return text;
}

PromSample parse_sample(const Json &pair) {
  // [1718000000.123, "42"]: values are strings, so that NaN and +Inf fit.
  return {pair.at(0).get<double>(), std::stod(pair.at(1).get<std::string>())};
}

}  // namespace

PrometheusServer::PrometheusServer(const Options &options) : port_(free_loopback_port()) {
  const std::string config_path = dir_.path() + "/prometheus.yml";
  // scrape_timeout below the interval: Prometheus rejects a timeout longer
  // than the interval, and its default (10 s) is.
  const std::string interval = std::to_string(options.scrape_interval_s) + "s";
  write_file(config_path, "global:\n"
                          "  scrape_interval: " + interval + "\n"
                          "  scrape_timeout: " + interval + "\n"
                          "  evaluation_interval: " + interval + "\n"
                          "scrape_configs:\n"
                          "  - job_name: " + options.job + "\n"
                          "    static_configs:\n"
                          "      - targets: [\"" + options.scrape_target + "\"]\n");
  // Loopback only, storage in the temporary directory; nothing else is
  // enabled (no admin API, no remote write, no lifecycle endpoints).
  process_ = std::make_unique<Process>(std::vector<std::string>{
      kPrometheusBin, "--config.file=" + config_path, "--storage.tsdb.path=" + dir_.path() + "/data",
      "--web.listen-address=127.0.0.1:" + std::to_string(port_)});
}

void PrometheusServer::wait_ready(milliseconds timeout) {
  const bool ready = wait_until(timeout, [&] {
    if (process_->wait_exit(milliseconds(0))) fail("prometheus exited during startup" + diagnostics());
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(std::chrono::seconds(1));
    auto result = client.Get("/-/ready");
    return result && result->status == 200;
  }, milliseconds(100));
  if (!ready) fail("prometheus not ready within " + std::to_string(timeout.count()) + " ms" + diagnostics());
}

Json PrometheusServer::query(const std::string &promql, double unix_time) {
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(10));
  const httplib::Params params{{"query", promql}, {"time", format_time(unix_time)}};
  auto result = client.Get("/api/v1/query", params, httplib::Headers{});
  if (!result) fail("query '" + promql + "': no reply from prometheus" + diagnostics());
  const Json reply = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (result->status != 200 || !reply.is_object() || reply.value("status", "") != "success") {
    fail("query '" + promql + "': status " + std::to_string(result->status) + ", body '" + result->body + "'");
  }
  return reply.at("data");
}

std::string PrometheusServer::diagnostics() const { return "\nprometheus log:\n" + process_->stderr_text(); }

PromSample instant_sample(const Json &element) { return parse_sample(element.at("value")); }

std::vector<PromSample> range_samples(const Json &element) {
  std::vector<PromSample> out;
  for (const Json &pair : element.at("values")) out.push_back(parse_sample(pair));
  return out;
}

PromtoolReport promtool_check_metrics(const std::string &exposition, const std::string &dir) {
  const std::string path = dir + "/metrics.txt";
  write_file(path, exposition);
  // promtool reads the exposition from stdin only; the path goes to the
  // shell as an argument, never into the script, so it needs no quoting.
  Process promtool({"/bin/sh", "-c", std::string("exec ") + kPromtoolBin + " check metrics < \"$1\" 2>&1", "sh",
                    path});
  PromtoolReport report;
  while (auto line = promtool.read_line(milliseconds(30000))) report.output += *line + "\n";
  const std::optional<int> status = promtool.wait_exit(milliseconds(30000));
  report.passed = status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  return report;
}

}  // namespace lw::itest
