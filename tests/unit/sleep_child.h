// SPDX-License-Identifier: Apache-2.0
// A real child process for the tests that need a live pid to attach to or
// kill: /bin/sleep 60, forked as `uid` (0: as the test), returned once it
// has exec'd (its comm reads "sleep"); SIGKILLed and reaped on destruction.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace lw {

struct SleepChild {
  explicit SleepChild(uid_t uid = 0) {
    pid = fork();
    if (pid == 0) {
      if (uid != 0 && (setgid(uid) != 0 || setuid(uid) != 0)) _exit(126);
      execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 5000; ++i) {
      std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
      std::string comm;
      std::getline(f, comm);
      if (comm == "sleep") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  ~SleepChild() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  SleepChild(const SleepChild&) = delete;
  SleepChild& operator=(const SleepChild&) = delete;
  pid_t pid = -1;
};

}  // namespace lw
