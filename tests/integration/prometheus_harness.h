/* SPDX-License-Identifier: Apache-2.0 */
// Harness for the tests that put a real Prometheus server (Debian's
// /usr/bin/prometheus, installed by scripts/install-deps.sh
// --with-test-tools) in front of `leakwatch run`: starts one that scrapes a
// single target, on loopback only, with its storage in a private temporary
// directory; runs PromQL through its HTTP API; and runs `promtool check
// metrics` on an exposition.
//
// Like harness.h, the server runs in its own process group, killed when the
// object goes away, so a failed assertion leaves nothing behind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon_harness.h"

namespace lw::itest {

inline constexpr const char *kPrometheusBin = "/usr/bin/prometheus";
inline constexpr const char *kPromtoolBin = "/usr/bin/promtool";

class PrometheusServer {
 public:
  struct Options {
    std::string job;            // the scrape job's name, Prometheus's `job` label
    std::string scrape_target;  // host:port serving /metrics
    int scrape_interval_s = 5;
  };

  // Writes the config and starts the server; does not wait for it.
  explicit PrometheusServer(const Options &options);
  PrometheusServer(const PrometheusServer &) = delete;
  PrometheusServer &operator=(const PrometheusServer &) = delete;

  int port() const { return port_; }
  // Polls /-/ready; throws with the server's log if it does not answer 200
  // in time or exits.
  void wait_ready(milliseconds timeout);
  // An instant query evaluated at `unix_time`: the API's `data` object
  // (resultType and result). Throws, with the query, on any error.
  Json query(const std::string &promql, double unix_time);
  // The server's log, for failure messages.
  std::string diagnostics() const;

 private:
  TempDir dir_;  // declared before process_: removed after it is killed
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

// One sample of a query result.
struct PromSample {
  double unix_time = 0;
  double value = 0;
};

// The sample of an instant-vector element ({"metric":..., "value":[t, "v"]}).
PromSample instant_sample(const Json &element);
// The samples of a range-vector element ({"metric":..., "values":[...]}),
// oldest first.
std::vector<PromSample> range_samples(const Json &element);

struct PromtoolReport {
  bool passed = false;
  std::string output;  // what promtool printed, stdout and stderr
};
// Runs `promtool check metrics` (the linter included) on `exposition`,
// written to a file in `dir` first.
PromtoolReport promtool_check_metrics(const std::string &exposition, const std::string &dir);

}  // namespace lw::itest
