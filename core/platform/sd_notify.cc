// SPDX-License-Identifier: Apache-2.0
#include "core/platform/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lw {

namespace {

// The socket sd_notify_connect connected, or -1; set before any thread.
int g_connected_fd = -1;

// NOTIFY_SOCKET as an address; false when unset or unusable.
bool notify_address(struct sockaddr_un& addr, socklen_t& addr_len) {
  const char* path = getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return false;
  size_t len = strlen(path);
  addr = {};
  if (len >= sizeof(addr.sun_path) || (path[0] != '/' && path[0] != '@')) return false;
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract socket
  addr_len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + len);
  return true;
}

}  // namespace

bool sd_notify_connect() {
  struct sockaddr_un addr;
  socklen_t addr_len = 0;
  if (g_connected_fd >= 0 || !notify_address(addr, addr_len)) return g_connected_fd >= 0;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (connect(fd, reinterpret_cast<const struct sockaddr*>(&addr), addr_len) != 0) {
    close(fd);
    return false;
  }
  g_connected_fd = fd;
  return true;
}

bool sd_notify_send(const std::string& state) {
  // never block the consumer loop
  if (g_connected_fd >= 0) {
    ssize_t n = send(g_connected_fd, state.data(), state.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(state.size());
  }
  struct sockaddr_un addr;
  socklen_t addr_len = 0;
  if (!notify_address(addr, addr_len)) return false;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL | MSG_DONTWAIT,
                     reinterpret_cast<const struct sockaddr*>(&addr), addr_len);
  close(fd);
  return n == static_cast<ssize_t>(state.size());
}

std::optional<std::chrono::microseconds> sd_watchdog_interval() {
  const char* usec = getenv("WATCHDOG_USEC");
  if (usec == nullptr) return std::nullopt;
  if (const char* pid = getenv("WATCHDOG_PID"); pid != nullptr && atol(pid) != getpid())
    return std::nullopt;
  char* end = nullptr;
  unsigned long long v = strtoull(usec, &end, 10);
  if (end == usec || *end != '\0' || v == 0) return std::nullopt;
  return std::chrono::microseconds(v);
}

}  // namespace lw
