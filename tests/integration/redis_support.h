// SPDX-License-Identifier: Apache-2.0
// Debian's redis-server for the integration tests: a private instance on a
// unix socket, its `used_memory`, and redis-benchmark/redis-cli runs.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness.h"

namespace lw::itest {

// stdout of `cmd` (sh -c), whole.
inline std::string run_capture(const std::string &cmd) {
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// redis' own `used_memory` (INFO memory), -1 when it does not answer.
inline int64_t used_memory(const std::string &sock) {
  std::string info = run_capture("redis-cli -s " + sock + " INFO memory 2>/dev/null");
  size_t at = info.find("used_memory:");
  if (at == std::string::npos) return -1;
  return std::stoll(info.substr(at + 12));
}

inline bool redis_installed() {
  return access("/usr/bin/redis-server", X_OK) == 0 && access("/usr/bin/redis-benchmark", X_OK) == 0 &&
         access("/usr/bin/redis-cli", X_OK) == 0;
}

// A redis-server with no persistence on a unix socket in a fresh
// directory, answering once constructed (or `process` has exited).
struct RedisServer {
  std::string dir;
  std::string sock;
  std::unique_ptr<Process> process;
  explicit RedisServer(const std::string &exe = "/usr/bin/redis-server") {
    char dir_template[] = "/tmp/lw-redis-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp");
    dir = dir_template;
    sock = dir + "/redis.sock";
    process = std::make_unique<Process>(std::vector<std::string>{
        exe, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir});
    for (int i = 0; i < 100 && used_memory(sock) < 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~RedisServer() {
    process.reset();
    run_capture("rm -rf " + dir);
  }
  pid_t pid() const { return process->pid(); }
  int64_t used() const { return used_memory(sock); }
  // SETs of random keys out of `keys` (3x as many requests: about 95% of
  // them exist after), `value` bytes each, pipelined.
  void fill(uint64_t keys, int value = 100) const {
    run_capture("redis-benchmark -s " + sock + " -t set -r " + std::to_string(keys) + " -n " +
                std::to_string(3 * keys) + " -d " + std::to_string(value) + " -P 16 -q 2>&1");
  }
};

}  // namespace lw::itest
