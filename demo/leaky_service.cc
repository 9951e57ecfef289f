// SPDX-License-Identifier: Apache-2.0
// A small "service" that leaks on purpose, for the README demo: every
// request remembers a session that is never forgotten (the leak), and
// parses with temporary buffers that are freed (churn, not a leak).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Session {
  char token[4096];
};

std::vector<Session*> g_sessions;  // grows forever: the bug

__attribute__((noinline)) void remember_session(int request) {
  auto* s = new Session;
  snprintf(s->token, sizeof(s->token), "session-%d", request);
  g_sessions.push_back(s);
}

__attribute__((noinline)) size_t parse_request(int request) {
  char* buf = static_cast<char*>(malloc(16384));
  size_t n = static_cast<size_t>(snprintf(buf, 16384, "GET /model/%d", request));
  free(buf);
  return n;
}

__attribute__((noinline)) void handle_request(int request) {
  parse_request(request);
  if (request % 2 == 0) remember_session(request);
}

}  // namespace

int main() {
  printf("leaky_service: pid %d serving\n", getpid());
  fflush(stdout);
  for (int request = 0;; ++request) {
    handle_request(request);
    usleep(10000);  // 100 requests/s: 200 KiB/s leaked
  }
}
